/*
 * The engine's optional parts are shared objects loaded when first asked
 * for (the CUDA backend, the MPI collectives), so one privai-engine runs
 * where their libraries are missing and says which one is.
 */
#ifndef PRIVAI_PLUGIN_H
#define PRIVAI_PLUGIN_H

/* dlopen() `file` from $env when that is set (and nowhere else then),
 * else beside this binary (a build tree), else from ../lib/privai (the
 * installed layout).  NULL with err naming `what` and the paths tried,
 * or the loader's complaint (usually a library the plugin needs). */
void *plugin_open(const char *file, const char *env, const char *what, char *err);

#endif
