/* getopt_flag.h — one helper the example programs share: telling "--graph=1" (a flag that
 * takes no value, given one) from an unknown option after getopt_long returned '?'. */
#ifndef TD_EXAMPLES_GETOPT_FLAG_H
#define TD_EXAMPLES_GETOPT_FLAG_H

#include <getopt.h>
#include <string.h>

/* The name of the no-value long option that `arg` ("--NAME=VALUE") gives a value to, or
 * NULL when arg is not that (an unknown option). `longopts` ends with a zero entry. */
static inline const char *getopt_flag_given_value(const struct option *longopts, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (eq == NULL || strncmp(arg, "--", 2) != 0) return NULL;
    const size_t len = (size_t)(eq - arg - 2);
    for (const struct option *lo = longopts; lo->name != NULL; lo++)
        if (lo->has_arg == no_argument && strlen(lo->name) == len &&
            strncmp(arg + 2, lo->name, len) == 0)
            return lo->name;
    return NULL;
}
#endif
