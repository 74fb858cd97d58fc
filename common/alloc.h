/* alloc.h — replaceable allocation hooks.
 * Every allocation in the project goes through td__malloc/td__calloc/td__realloc/td__free
 * so tests can make the Nth allocation fail (curl and SQLite do the same). The hooks are
 * process-wide; set them before any other call. Thread-safety: the functions are as
 * thread-safe as the hooks (the defaults are libc's). */
#ifndef TD_COMMON_ALLOC_H
#define TD_COMMON_ALLOC_H
#include <stddef.h>

typedef struct td__alloc_hooks {
    void *(*malloc_fn)(size_t);
    void *(*calloc_fn)(size_t, size_t);
    void *(*realloc_fn)(void *, size_t);
    void (*free_fn)(void *);
} td__alloc_hooks;

/* Replace the hooks; NULL restores libc's. */
void td__alloc_set_hooks(const td__alloc_hooks *hooks);
void *td__malloc(size_t n);
void *td__calloc(size_t count, size_t size);
void *td__realloc(void *p, size_t n);
void td__free(void *p);
char *td__strdup(const char *s);
#endif
