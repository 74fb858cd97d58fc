/* Unit tests of common/log.c: the line formats of log.h. Expected times computed with
 * Python's datetime (fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds"):
 * 1764612000123 ms -> 2025-12-01T18:00:00.123, 951782400007 ms -> 2000-02-29T00:00:00.007). */
#include "common/log.h"

#include <criterion/criterion.h>
#include <string.h>

static char line[2048];

Test(log, plain_is_unchanged)
{
    size_t n = td__log_format_line(line, sizeof line, TD_LOG_FORMAT_PLAIN, false, TD_LOG_WARN,
                                   "libtensord", 1764612000123, "backend cuda: no devices");
    cr_assert_str_eq(line, "libtensord: warning: backend cuda: no devices\n");
    cr_assert_eq(n, strlen(line));
}

Test(log, text_has_rfc3339_utc_milliseconds)
{
    td__log_format_line(line, sizeof line, TD_LOG_FORMAT_TEXT, false, TD_LOG_INFO, "tensord",
                        1764612000123, "hello");
    cr_assert_str_eq(line, "2025-12-01T18:00:00.123Z tensord: info: hello\n");
    td__log_format_line(line, sizeof line, TD_LOG_FORMAT_TEXT, false, TD_LOG_ERROR, "tensord",
                        951782400007, "leap day");
    cr_assert_str_eq(line, "2000-02-29T00:00:00.007Z tensord: error: leap day\n");
}

Test(log, journal_gets_priorities_and_no_time)
{
    static const struct {
        enum td__log_level level;
        const char *want;
    } cases[] = {
        {TD_LOG_DEBUG, "<7>tensord: debug: m\n"},
        {TD_LOG_INFO, "<6>tensord: info: m\n"},
        {TD_LOG_WARN, "<4>tensord: warning: m\n"},
        {TD_LOG_ERROR, "<3>tensord: error: m\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        td__log_format_line(line, sizeof line, TD_LOG_FORMAT_TEXT, true, cases[i].level,
                            "tensord", 1764612000123, "m");
        cr_assert_str_eq(line, cases[i].want);
    }
}

Test(log, json_escapes_and_orders_keys)
{
    td__log_format_line(line, sizeof line, TD_LOG_FORMAT_JSON, false, TD_LOG_WARN, "tensord",
                        1764612000123, "a \"quoted\" \\path\\\nnew\tline\x01");
    cr_assert_str_eq(line, "{\"time\":\"2025-12-01T18:00:00.123Z\",\"level\":\"warning\","
                           "\"prog\":\"tensord\",\"msg\":\"a \\\"quoted\\\" \\\\path\\\\\\nnew"
                           "\\tline\\u0001\"}\n");
    td__log_format_line(line, sizeof line, TD_LOG_FORMAT_JSON, true, TD_LOG_INFO, "tensord",
                        1764612000123, "x");
    cr_assert_str_eq(line, "<6>{\"time\":\"2025-12-01T18:00:00.123Z\",\"level\":\"info\","
                           "\"prog\":\"tensord\",\"msg\":\"x\"}\n");
}

/* A message longer than the buffer is cut between whole characters (never half an escape)
 * and the line still closes: quote, brace, newline. */
Test(log, json_cut_short_still_parses)
{
    char msg[600];
    for (size_t i = 0; i < sizeof msg - 1; i++) msg[i] = i % 3 == 0 ? '"' : 'x';
    msg[sizeof msg - 1] = '\0';
    char small[200];
    size_t n = td__log_format_line(small, sizeof small, TD_LOG_FORMAT_JSON, false, TD_LOG_INFO,
                                   "tensord", 0, msg);
    cr_assert_eq(n, strlen(small));
    cr_assert(n < sizeof small);
    cr_assert_str_eq(small + n - 3, "\"}\n");
    /* the character before the closing quote is not an escape's backslash left alone */
    size_t bs = 0;
    for (size_t i = n - 4; small[i] == '\\'; i--) bs++;
    cr_assert_eq(bs % 2, 0, "a dangling backslash before the closing quote");
    n = td__log_format_line(small, sizeof small, TD_LOG_FORMAT_TEXT, false, TD_LOG_INFO,
                            "tensord", 0, msg);
    cr_assert_eq(small[n - 1], '\n');
    cr_assert(n < sizeof small);
}
