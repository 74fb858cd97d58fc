/* Unit tests for engine/device.c's module check: a module built for another backend ABI,
 * or one from before the ABI was exported, is refused with a message naming both versions;
 * one built for this ABI is accepted. The modules are abi_module.c built three ways
 * (tests/unit/engine/meson.build); TD_TEST_MODULE_DIR is their build folder. */
#include "engine/device.h"
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static td_status open_module(const char *name, const td__backend **be, char *err, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", TD_TEST_MODULE_DIR, name);
    void *h = NULL;
    td_status st = td__backend_module_open(path, be, &h, err, len);
    if (st == TD_OK) dlclose(h);
    return st;
}

Test(backend_abi, same_version_is_accepted)
{
    const td__backend *be = NULL;
    char err[1024] = "";
    cr_assert_eq(open_module("abi-test-ok.so", &be, err, sizeof err), TD_OK, "%s", err);
}

Test(backend_abi, other_version_is_refused)
{
    const td__backend *be = NULL;
    char err[1024] = "", want[128];
    cr_assert_eq(open_module("abi-test-wrong.so", &be, err, sizeof err), TD_EUNSUPPORTED, "%s",
                 err);
    snprintf(want, sizeof want, "built for backend ABI %u, this engine has ABI %u",
             TD_BACKEND_ABI_VERSION + 1, TD_BACKEND_ABI_VERSION);
    cr_assert(strstr(err, want) && strstr(err, "abi-test-wrong.so refused"), "%s", err);
}

Test(backend_abi, module_without_a_version_is_refused)
{
    const td__backend *be = NULL;
    char err[1024] = "", want[160];
    cr_assert_eq(open_module("abi-test-none.so", &be, err, sizeof err), TD_EUNSUPPORTED, "%s",
                 err);
    snprintf(want, sizeof want,
             "built for backend ABI 1 (it exports no td_backend_abi), this engine has ABI %u",
             TD_BACKEND_ABI_VERSION);
    cr_assert(strstr(err, want), "%s", err);
}

Test(backend_abi, missing_file_is_not_found)
{
    const td__backend *be = NULL;
    char err[1024] = "";
    cr_assert_eq(open_module("no-such-module.so", &be, err, sizeof err), TD_ENOTFOUND);
    cr_assert(strstr(err, "not loaded"), "%s", err);
}
