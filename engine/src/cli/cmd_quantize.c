#include "cli.h"
int cmd_quantize(int argc, char **argv) { (void)argc; (void)argv; return cli_error("quantize", "not built yet"); }
