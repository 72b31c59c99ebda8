/* SPDX-License-Identifier: Apache-2.0 */
/* A shared library that is not a backend: it lacks hal_backend_get_ops. */
__attribute__((visibility("default"))) int not_a_backend(void)
{
    return 0;
}
