/* argv_opt.h — the GNU "--name=value" spelling for the hand-rolled option loops of tensorctl
 * (tools/) and tensord-bench (bench/), which tensord and the examples get from getopt_long.
 * Each loop splits its argument once and then goes on as before: it compares option names
 * with strcmp, takes a value from the same argument or the next one, and refuses a value
 * given to a flag in its own words and with its own exit status. Header-only (static
 * inline), so that bench/ uses it without linking anything of tools/.
 * Thread-safety: no shared state; any thread, one argv_opt per argument read.
 */
#ifndef TD_TOOLS_ARGV_OPT_H
#define TD_TOOLS_ARGV_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* Bytes of name_buf: an option name, "--" and the terminating NUL included (the longest
 * these programs know, "--max-queued-batches", has 20). */
#define ARGV_OPT_NAME_MAX 64

/* One command-line argument read as an option. */
typedef struct argv_opt {
    const char *name; /* "--timeout" for "--timeout=5000"; else the whole argument */
    char *value;      /* "5000" for "--timeout=5000" (possibly "", possibly holding '='),
                         inside the argument; NULL when the argument carries no value */
    char name_buf[ARGV_OPT_NAME_MAX]; /* name's bytes when the argument was split */
} argv_opt;

/* Read `arg` as an option into *o. An argument that starts with "--", has a name of at
 * least one byte and then a '=' ("--timeout=5000", "--input=x=a.npy", "--label=") is split
 * at its first '=': o->name "--timeout", o->value "5000", "x=a.npy" or "". Any other
 * argument ("--timeout", "-t", "-t=5", "ADDR", "-", "--=x", or a name that does not fit
 * name_buf, which no option has) is o->name whole, with o->value NULL.
 * `arg` is borrowed and must outlive *o: o->value and possibly o->name point into it.
 * o->name may also point into *o, so *o is used where it was filled, never copied.
 * Thread-safety: touches only *o. */
static inline void argv_opt_split(char *arg, argv_opt *o)
{
    o->name = arg;
    o->value = NULL;
    char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg + 2, '=') : NULL;
    if (eq == NULL || eq == arg + 2 || (size_t)(eq - arg) >= sizeof o->name_buf) return;
    memcpy(o->name_buf, arg, (size_t)(eq - arg));
    o->name_buf[eq - arg] = '\0';
    o->name = o->name_buf;
    o->value = eq + 1;
}

/* Whether an option name (argv_opt.name) asks for the usage: "-h" or "--help". */
static inline bool argv_opt_is_help(const char *name)
{
    return strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0;
}

/* The value of the option that argv_opt_split read from argv[*i] into *o: o->value when
 * the argument carried one, else argv[*i + 1], with *i stepped onto it (whatever it is,
 * "-5" included). NULL, *i unchanged, when there is none: "--timeout=" (an empty value) or
 * no argument after "--timeout". The pointer is into argv, which the caller owns.
 * Thread-safety: touches only *i. */
static inline char *argv_opt_value(const argv_opt *o, int argc, char **argv, int *i)
{
    if (o->value != NULL) return o->value[0] != '\0' ? o->value : NULL;
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
}
#endif
