/* bytes.c — byte counts with binary suffixes (bytes.h). */
#include "common/bytes.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

int td__parse_bytes(const char *text, uint64_t *out)
{
    if (text[0] == '\0' || !isdigit((unsigned char)text[0])) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0) return -1;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    case 'B': shift = 0; break;
    default: return -1;
    }
    if (*end != '\0') {
        end++;
        if (shift != 0 && (*end == 'i' || *end == 'I')) end++;
        if (shift != 0 && (*end == 'b' || *end == 'B')) end++;
        if (*end != '\0') return -1;
    }
    if (shift != 0 && v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}
