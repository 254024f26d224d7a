/*
 * Chat templates: each family recognised from the marker text of its
 * published template, rendered exactly (system, user, assistant, user,
 * then the assistant's header), and conversations a family cannot express
 * refused with a reason.
 */
#include "testlib.h"
#include "server/chat_template.h"

static const struct chat_message conv[] = {
	{ .role = ROLE_SYSTEM, .content = "S" },
	{ .role = ROLE_USER, .content = "U1" },
	{ .role = ROLE_ASSISTANT, .content = "A1" },
	{ .role = ROLE_USER, .content = "U2" },
};

static void
expect(enum chat_family f, const char *want)
{
	struct strbuf b;
	char err[256] = "";

	strbuf_init(&b);
	int r = chat_render(f, conv, 4, &b, err, sizeof(err));
	CHECK(r == 0 && b.s != NULL && strcmp(b.s, want) == 0, "%s renders\n  got:  %s\n  want: %s (%s)",
	      chat_family_name(f), b.s ? b.s : "(null)", want, err);
	strbuf_free(&b);
}

int
main(void)
{
	static const struct {
		const char *snippet;
		enum chat_family f;
	} detect[] = {
		{ "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}{{ '<|eot_id|>' }}",
		  CHAT_LLAMA3 },
		{ "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}", CHAT_CHATML },
		{ "{{ '<start_of_turn>' + role + '\n' }}", CHAT_GEMMA },
		{ "{{'<|user|>' + '\n' + message['content'] + '<|end|>'}}", CHAT_PHI3 },
		{ "{{'<\xef\xbd\x9cUser\xef\xbd\x9c>' + message['content']}}", CHAT_DEEPSEEK3 },
		{ "{{ bos_token + '[INST] ' + '<<SYS>>\\n' }}", CHAT_LLAMA2 },
		{ "{{ '[INST] ' + message['content'] + ' [/INST]' }}", CHAT_MISTRAL },
		{ "{{ 'User: ' + message['content'] + '\\n\\n' }}{{ 'Assistant: ' }}", CHAT_DEEPSEEK },
		{ "{{ messages | tojson }}", CHAT_NONE },
	};
	for (size_t i = 0; i < sizeof(detect) / sizeof(detect[0]); i++)
		CHECK(chat_family_detect(detect[i].snippet) == detect[i].f, "detect %s", chat_family_name(detect[i].f));
	CHECK(chat_family_by_name("qwen") == CHAT_CHATML && chat_family_by_name("nope") == CHAT_NONE, "names");

	expect(CHAT_LLAMA3, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
			    "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"
			    "<|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|>"
			    "<|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
			    "<|start_header_id|>assistant<|end_header_id|>\n\n");
	expect(CHAT_CHATML,
	       "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
	       "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n");
	expect(CHAT_LLAMA2, "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1</s><s>[INST] U2 [/INST]");
	expect(CHAT_MISTRAL, "<s>[INST] S\n\nU1 [/INST] A1</s>[INST] U2 [/INST]");
	expect(CHAT_PHI3, "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n<|user|>\nU2<|end|>\n"
			  "<|assistant|>\n");
	expect(CHAT_GEMMA, "<bos><start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
			   "<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n");
	expect(CHAT_DEEPSEEK3, "<\xef\xbd\x9c"
			       "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>S"
			       "<\xef\xbd\x9cUser\xef\xbd\x9c>U1<\xef\xbd\x9c"
			       "Assistant\xef\xbd\x9c>A1"
			       "<\xef\xbd\x9c"
			       "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
			       "<\xef\xbd\x9cUser\xef\xbd\x9c>U2<\xef\xbd\x9c"
			       "Assistant\xef\xbd\x9c>");

	/* what a family cannot express */
	struct strbuf b;
	char err[256];
	static const struct chat_message two_users[] = { { .role = ROLE_USER, .content = "a" },
							 { .role = ROLE_USER, .content = "b" } };
	static const struct chat_message late_sys[] = { { .role = ROLE_USER, .content = "a" },
							{ .role = ROLE_SYSTEM, .content = "s" } };
	strbuf_init(&b);
	CHECK(chat_render(CHAT_LLAMA2, two_users, 2, &b, err, sizeof(err)) == -1 && strstr(err, "alternate"),
	      "llama2 refuses two user turns in a row: %s", err);
	CHECK(chat_render(CHAT_LLAMA2, late_sys, 2, &b, err, sizeof(err)) == -1 && strstr(err, "system"),
	      "llama2 refuses a late system message: %s", err);
	CHECK(chat_render(CHAT_NONE, conv, 4, &b, err, sizeof(err)) == -1 && strstr(err, "--chat-template"),
	      "no template: the error says how to pick one: %s", err);
	CHECK(chat_render(CHAT_CHATML, conv, 0, &b, err, sizeof(err)) == -1, "no messages");
	strbuf_free(&b);
	return test_summary();
}
