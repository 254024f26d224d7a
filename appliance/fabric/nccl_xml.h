/*
 * NCCL's topology files in the dialect NCCL's own reader takes
 * (src/graph/xml.cc): elements with quoted attributes separated by one
 * space, at most 16 attributes, names and values under 256 characters,
 * whitespace only spaces and newlines, comments, and nothing else: no
 * XML declaration, no text, no entities, no tabs.  A file that a general
 * XML parser accepts can still be one NCCL stops on, so we read it the
 * way NCCL does, and every file we write parses both ways.
 */
#ifndef PRIVAI_NCCL_XML_H
#define PRIVAI_NCCL_XML_H

#include <stddef.h>

#define NCCL_XML_MAX_STR 255  /* NCCL's MAX_STR_LEN */
#define NCCL_XML_MAX_ATTRS 16 /* NCCL's MAX_ATTR_COUNT */
#define NCCL_XML_MAX_NODES 4096
#define NCCL_XML_MAX_DEPTH 32
#define NCCL_XML_MAX_BYTES (1 << 20)

struct nccl_attr {
	char *key, *value;
};

struct nccl_node {
	char *name;
	int line;
	int n_attrs;
	struct nccl_attr attr[NCCL_XML_MAX_ATTRS];
	struct nccl_node *parent, *first_child, *next;
};

/* Parse text (len bytes).  The root element, or NULL with err naming the
 * line and the problem. */
struct nccl_node *nccl_xml_parse(const char *text, size_t len, char *err, size_t errsize);
void nccl_xml_free(struct nccl_node *n);

/* An attribute's value, or NULL. */
const char *nccl_xml_attr(const struct nccl_node *n, const char *key);

/* The next node after n in document order (depth first), or NULL. */
struct nccl_node *nccl_xml_walk(struct nccl_node *n);

/* The nearest ancestor named name, or NULL. */
struct nccl_node *nccl_xml_ancestor(struct nccl_node *n, const char *name);

#endif
