/* alloc.c — see alloc.h. A struct of function pointers, swapped whole. */
#include "alloc.h"
#include <stdlib.h>
#include <string.h>

static td__alloc_hooks g_hooks = {malloc, calloc, realloc, free};

void td__alloc_set_hooks(const td__alloc_hooks *hooks)
{
    if (hooks == NULL) {
        g_hooks = (td__alloc_hooks){malloc, calloc, realloc, free};
    } else {
        g_hooks = *hooks;
    }
}

void *td__malloc(size_t n) { return g_hooks.malloc_fn(n ? n : 1); }
void *td__calloc(size_t count, size_t size) { return g_hooks.calloc_fn(count ? count : 1, size ? size : 1); }
void *td__realloc(void *p, size_t n) { return g_hooks.realloc_fn(p, n ? n : 1); }
void td__free(void *p) { g_hooks.free_fn(p); }

char *td__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = td__malloc(n);
    if (d != NULL) {
        memcpy(d, s, n);
    }
    return d;
}
