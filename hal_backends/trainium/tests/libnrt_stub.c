/* SPDX-License-Identifier: Apache-2.0 */
/* Test fixture: a "libnrt" that exports nrt_init and nothing else, so the backend must refuse
 * it at init and name every function it lacks. Never initialises anything. */

#if defined(__GNUC__)
#define STUB_EXPORT __attribute__((visibility("default")))
#else
#define STUB_EXPORT
#endif

STUB_EXPORT int nrt_init(int framework, const char *fw_version, const char *fal_version)
{
    (void)framework;
    (void)fw_version;
    (void)fal_version;
    return 1; /* NRT_FAILURE: the backend must not get this far */
}
