/* getopt_flag.h — one helper the example programs share: what to tell the user when
 * getopt_long (optstring ":", long options only) returned '?'. */
#ifndef TD_EXAMPLES_GETOPT_FLAG_H
#define TD_EXAMPLES_GETOPT_FLAG_H

#include <getopt.h>
#include <stdio.h>
#include <string.h>

/* Writes the message for a '?' from getopt_long into buf: "option --NAME takes no value"
 * for a flag given a value ("--graph=1", or an abbreviation of it: getopt_long set optopt
 * to the flag's val), "unknown option '-x'" for a short option (these programs have none;
 * getopt_long may not have stepped past its argument, so the letter comes from optopt),
 * else "unknown option 'ARG'". `arg` is argv[optind - 1], `longopts` ends with a zero entry,
 * and every val in it is unique. Returns buf. */
static inline const char *getopt_bad_option(const struct option *longopts, const char *arg,
                                            int opt, char *buf, size_t len)
{
    if (opt != 0 && strncmp(arg, "--", 2) == 0) {
        const char *eq = strchr(arg, '=');
        const size_t n = eq != NULL ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        for (const struct option *lo = longopts; lo->name != NULL; lo++)
            if (lo->val == opt && lo->has_arg == no_argument && eq != NULL && n > 0 &&
                strncmp(arg + 2, lo->name, n) == 0) {
                snprintf(buf, len, "option --%s takes no value", lo->name);
                return buf;
            }
    }
    if (opt > 0 && opt < 256)
        snprintf(buf, len, "unknown option '-%c'", opt);
    else
        snprintf(buf, len, "unknown option '%s'", arg);
    return buf;
}
#endif
