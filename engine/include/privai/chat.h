/*
 * The chat templates this engine renders, by the names `serve
 * --chat-template` takes: the one list the engine's server, `features
 * --json`, privai-admin's checks and the console's choices all come from.
 */
#ifndef PRIVAI_CHAT_H
#define PRIVAI_CHAT_H

/* The names, NULL-terminated, in a stable order; aliases included. */
const char *const *chat_template_names(void);

/* 1 when name is one of them. */
int chat_template_known(const char *name);

#endif
