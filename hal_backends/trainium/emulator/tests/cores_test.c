/* SPDX-License-Identifier: Apache-2.0 */
/* Visible cores (NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES), indices relative to the
 * visible set, logical core size, instance types, and exclusive ownership of cores across
 * processes. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hal_backends/trainium/emulator/tests/nrt_test_util.h"
#include "tools/ctest/ctest.h"

#define GIB (UINT64_C(1) << 30)

static nrt_api_t api; /* shared with forked children */

CTEST(nrt_cores, visible_cores_syntax)
{
    static const struct {
        const char *visible;
        NRT_STATUS status;
        uint32_t count;
    } cases[] = {
        { "0-3", NRT_SUCCESS, 4 },     { "5", NRT_SUCCESS, 1 },     { "3-5,6", NRT_SUCCESS, 4 },
        { "3,4,5,6", NRT_SUCCESS, 4 }, { "0-31", NRT_SUCCESS, 32 }, { "2-2", NRT_SUCCESS, 1 },
        { "1,3", NRT_INVALID, 0 },     { "3,5,6", NRT_INVALID, 0 }, { "4,3", NRT_INVALID, 0 },
        { "5-3", NRT_INVALID, 0 },     { "1,,2", NRT_INVALID, 0 },  { "1-", NRT_INVALID, 0 },
        { "-1", NRT_INVALID, 0 },      { " 1", NRT_INVALID, 0 },    { "1,", NRT_INVALID, 0 },
        { "a", NRT_INVALID, 0 },       { "30-32", NRT_FAILURE, 0 }, { "40", NRT_FAILURE, 0 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CTEST_CHECK(nrt_test_open(&api));
        setenv("NEURON_RT_VISIBLE_CORES", cases[i].visible, 1);
        setenv("NEURON_RT_NUM_CORES", "1", 1); /* VISIBLE_CORES takes precedence */
        uint32_t count = 0;
        NRT_STATUS before = api.get_visible_vnc_count(&count);
        NRT_STATUS status = nrt_test_init(&api);
        if (status != cases[i].status)
            fprintf(stderr, "VISIBLE_CORES=%s: nrt_init returned %d\n", cases[i].visible,
                    (int)status);
        CTEST_CHECK(status == cases[i].status);
        CTEST_CHECK(before == cases[i].status);
        if (status == NRT_SUCCESS) {
            CTEST_CHECK(count == cases[i].count);
            CTEST_CHECK(api.get_visible_vnc_count(&count) == NRT_SUCCESS);
            CTEST_CHECK(count == cases[i].count);
            CTEST_CHECK(api.get_total_vnc_count(&count) == NRT_SUCCESS && count == 32);
        }
        nrt_test_close(&api);
    }
    return CTEST_PASS;
}

CTEST(nrt_cores, num_cores_and_default)
{
    CTEST_CHECK(nrt_test_open(&api));
    uint32_t count = 0;
    setenv("NEURON_RT_NUM_CORES", "4", 1);
    CTEST_CHECK(api.get_visible_vnc_count(&count) == NRT_SUCCESS && count == 4);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(api.get_visible_nc_count(&count) == NRT_SUCCESS && count == 4);
    CTEST_CHECK(api.get_total_nc_count(&count) == NRT_SUCCESS && count == 32);
    api.close();
    setenv("NEURON_RT_NUM_CORES", "0", 1); /* 0 means all */
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(api.get_visible_vnc_count(&count) == NRT_SUCCESS && count == 32);
    api.close();
    unsetenv("NEURON_RT_NUM_CORES"); /* neither: all cores */
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(api.get_visible_vnc_count(&count) == NRT_SUCCESS && count == 32);
    api.close();
    setenv("NEURON_RT_NUM_CORES", "33", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_FAILURE);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_cores, indices_are_relative_to_the_visible_set)
{
    CTEST_CHECK(nrt_test_open(&api));
    setenv("NEURON_RT_VISIBLE_CORES", "3-4", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    nrt_tensor_t *a = NULL, *b = NULL, *c = NULL;
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 4096, "a", &a) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 1, 8192, "b", &b) == NRT_SUCCESS);
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 2, 4096, "c", &c) == NRT_INVALID);
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 3, 4096, "c", &c) == NRT_INVALID);
    CTEST_CHECK(api.tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, -1, 4096, "c", &c) == NRT_INVALID);
    CTEST_CHECK(c == NULL);
    CTEST_CHECK(nrt_test_used(&api, 0) == 4096 && nrt_test_used(&api, 1) == 8192);
    nrt_vnc_memory_stats_t stats;
    size_t written;
    CTEST_CHECK(api.get_vnc_memory_stats(2, &stats, sizeof(stats), &written) == NRT_INVALID);
    api.tensor_free(&a);
    api.tensor_free(&b);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_cores, instance_types_counts_and_capacity)
{
    static const struct {
        const char *instance, *lnc;
        uint32_t family, size, total;
        uint64_t hbm;
    } cases[] = {
        { "trn1.32xlarge", NULL, NRT_INSTANCE_TRN1, NRT_INSTANCE_SIZE_32XL, 32, 16 * GIB },
        { "trn1.2xlarge", NULL, NRT_INSTANCE_TRN1, NRT_INSTANCE_SIZE_2XL, 2, 16 * GIB },
        { "trn1n.32xlarge", NULL, NRT_INSTANCE_TRN1N, NRT_INSTANCE_SIZE_32XL, 32, 16 * GIB },
        { "trn2.48xlarge", NULL, NRT_INSTANCE_TRN2, NRT_INSTANCE_SIZE_48XL, 64, 24 * GIB },
        { "trn2.48xlarge", "2", NRT_INSTANCE_TRN2, NRT_INSTANCE_SIZE_48XL, 64, 24 * GIB },
        { "trn2.48xlarge", "1", NRT_INSTANCE_TRN2, NRT_INSTANCE_SIZE_48XL, 128, 12 * GIB },
        { "trn2u.48xlarge", NULL, NRT_INSTANCE_TRN2U, NRT_INSTANCE_SIZE_48XL, 64, 24 * GIB },
        { "inf2.xlarge", NULL, NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_1XL, 2, 16 * GIB },
        { "inf2.24xlarge", NULL, NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_24XL, 12, 16 * GIB },
        { "inf2.48xlarge", NULL, NRT_INSTANCE_INF2, NRT_INSTANCE_SIZE_48XL, 24, 16 * GIB },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        CTEST_CHECK(nrt_test_open(&api));
        if (!nrt_test_is_emulator(&api)) {
            nrt_test_close(&api);
            CTEST_SKIP("selects emulated instance types");
        }
        if (i != 0) /* the first case checks the default instance type */
            setenv("NEURON_EMU_INSTANCE", cases[i].instance, 1);
        if (cases[i].lnc != NULL)
            setenv("NEURON_LOGICAL_NC_CONFIG", cases[i].lnc, 1);
        setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
        uint32_t total = 0;
        nrt_instance_info_t info;
        memset(&info, 0xff, sizeof(info));
        CTEST_CHECK(api.get_total_vnc_count(&total) == NRT_SUCCESS && total == cases[i].total);
        CTEST_CHECK(api.get_instance_info(&info, sizeof(info)) == NRT_SUCCESS);
        CTEST_CHECK(info.family == cases[i].family && info.size == cases[i].size);
        CTEST_CHECK(info.arch_name[sizeof(info.arch_name) - 1] == '\0');
        CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
        CTEST_CHECK(api.get_total_nc_count(&total) == NRT_SUCCESS && total == cases[i].total);
        CTEST_CHECK(nrt_test_limit(&api, 0) == cases[i].hbm);
        CTEST_CHECK(nrt_test_used(&api, 0) == 0);
        nrt_test_close(&api);
    }
    return CTEST_PASS;
}

CTEST(nrt_cores, instance_info_sizes)
{
    CTEST_CHECK(nrt_test_open(&api));
    unsigned char buf[40];
    memset(buf, 0xcd, sizeof(buf));
    /* An older caller that knows only family and size. */
    CTEST_CHECK(api.get_instance_info((nrt_instance_info_t *)(void *)buf, 8) == NRT_SUCCESS);
    CTEST_CHECK(buf[8] == 0xcd);
    CTEST_CHECK(api.get_instance_info((nrt_instance_info_t *)(void *)buf, 4) == NRT_INVALID);
    CTEST_CHECK(api.get_instance_info(NULL, 32) == NRT_INVALID);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_cores, logical_core_size_variables)
{
    CTEST_CHECK(nrt_test_open(&api));
    if (!nrt_test_is_emulator(&api)) {
        nrt_test_close(&api);
        CTEST_SKIP("selects emulated instance types");
    }
    uint32_t total = 0;
    setenv("NEURON_EMU_INSTANCE", "trn2.48xlarge", 1);
    setenv("NEURON_RT_VIRTUAL_CORE_SIZE", "1", 1);
    CTEST_CHECK(api.get_total_vnc_count(&total) == NRT_SUCCESS && total == 128);
    setenv("NEURON_LOGICAL_NC_CONFIG", "2", 1); /* disagrees */
    CTEST_CHECK(api.get_total_vnc_count(&total) == NRT_INVALID);
    setenv("NEURON_RT_VIRTUAL_CORE_SIZE", "2", 1);
    CTEST_CHECK(api.get_total_vnc_count(&total) == NRT_SUCCESS && total == 64);
    setenv("NEURON_LOGICAL_NC_CONFIG", "4", 1);
    CTEST_CHECK(api.get_total_vnc_count(&total) == NRT_INVALID);
    CTEST_CHECK(nrt_test_init(&api) == NRT_INVALID);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* ---- ownership across processes ---- */

typedef struct {
    const char *visible;
    const char *num;
    const char *lnc;
    NRT_STATUS expected;
    const char *instance_id; /* NEURON_EMU_INSTANCE_ID; NULL: the parent's */
} child_init_t;

/* In a child: nrt_init with the given cores; exit 0 if the status is the expected one. */
static int child_init(void *arg)
{
    const child_init_t *c = arg;
    if (c->visible != NULL)
        setenv("NEURON_RT_VISIBLE_CORES", c->visible, 1);
    else
        unsetenv("NEURON_RT_VISIBLE_CORES");
    if (c->num != NULL)
        setenv("NEURON_RT_NUM_CORES", c->num, 1);
    if (c->lnc != NULL)
        setenv("NEURON_LOGICAL_NC_CONFIG", c->lnc, 1);
    if (c->instance_id != NULL)
        setenv("NEURON_EMU_INSTANCE_ID", c->instance_id, 1);
    NRT_STATUS status = nrt_test_init(&api);
    if (status != c->expected) {
        fprintf(stderr, "child: nrt_init returned %d, expected %d\n", (int)status,
                (int)c->expected);
        return 1;
    }
    return 0;
}

CTEST(nrt_cores, a_core_has_one_owner_until_close)
{
    CTEST_CHECK(nrt_test_open(&api));
    setenv("NEURON_RT_VISIBLE_CORES", "1-2", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    /* The child starts uninitialised and must not get a core the parent owns... */
    child_init_t overlap = { "2-3", NULL, NULL, NRT_FAILURE, NULL };
    CTEST_CHECK(nrt_test_in_child(child_init, &overlap) == 0);
    child_init_t same = { "1", NULL, NULL, NRT_FAILURE, NULL };
    CTEST_CHECK(nrt_test_in_child(child_init, &same) == 0);
    child_init_t all = { NULL, NULL, NULL, NRT_FAILURE, NULL };
    CTEST_CHECK(nrt_test_in_child(child_init, &all) == 0);
    /* ...but may take others; NUM_CORES picks the first free contiguous run. */
    child_init_t other = { "3-4", NULL, NULL, NRT_SUCCESS, NULL };
    CTEST_CHECK(nrt_test_in_child(child_init, &other) == 0);
    child_init_t count = { NULL, "2", NULL, NRT_SUCCESS, NULL };
    CTEST_CHECK(nrt_test_in_child(child_init, &count) == 0);
    child_init_t too_many = { NULL, "31", NULL, NRT_FAILURE, NULL };
    CTEST_CHECK(nrt_test_in_child(child_init, &too_many) == 0);
    /* The parent's forked copy dropping its inherited lock files left the parent owner. */
    CTEST_CHECK(nrt_test_in_child(child_init, &same) == 0);
    api.close();
    child_init_t after = { "1-3", NULL, NULL, NRT_SUCCESS, NULL };
    CTEST_CHECK(nrt_test_in_child(child_init, &after) == 0);
    child_init_t everything = { NULL, NULL, NULL, NRT_SUCCESS, NULL };
    CTEST_CHECK(nrt_test_in_child(child_init, &everything) == 0);
    nrt_test_close(&api);
    return CTEST_PASS;
}

static int child_init_and_hold(void *arg)
{
    int fd = *(int *)arg;
    setenv("NEURON_RT_VISIBLE_CORES", "7", 1);
    char ok = nrt_test_init(&api) == NRT_SUCCESS ? 'y' : 'n';
    if (write(fd, &ok, 1) != 1)
        return 2;
    pause(); /* until killed */
    return 0;
}

CTEST(nrt_cores, a_dead_owner_releases_its_cores)
{
    CTEST_CHECK(nrt_test_open(&api));
    int pipefd[2];
    CTEST_CHECK(pipe(pipefd) == 0);
    fflush(NULL);
    pid_t holder = fork();
    CTEST_CHECK(holder >= 0);
    if (holder == 0)
        _exit(child_init_and_hold(&pipefd[1]));
    char ok = 0;
    CTEST_CHECK(read(pipefd[0], &ok, 1) == 1 && ok == 'y');
    close(pipefd[0]);
    close(pipefd[1]);
    setenv("NEURON_RT_VISIBLE_CORES", "6-7", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_FAILURE); /* held by the live holder */
    kill(holder, SIGKILL);
    int status;
    CTEST_CHECK(waitpid(holder, &status, 0) == holder && WIFSIGNALED(status));
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS); /* released by the kernel */
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_cores, logical_cores_lock_their_physical_cores)
{
    CTEST_CHECK(nrt_test_open(&api));
    if (!nrt_test_is_emulator(&api)) {
        nrt_test_close(&api);
        CTEST_SKIP("selects emulated instance types");
    }
    setenv("NEURON_EMU_INSTANCE", "trn2.48xlarge", 1);
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1); /* LNC=2: physical cores 0 and 1 */
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    child_init_t phys1 = { "1", NULL, "1", NRT_FAILURE, NULL }; /* LNC=1 core 1 = physical 1 */
    CTEST_CHECK(nrt_test_in_child(child_init, &phys1) == 0);
    child_init_t phys2 = { "2", NULL, "1", NRT_SUCCESS, NULL };
    CTEST_CHECK(nrt_test_in_child(child_init, &phys2) == 0);
    child_init_t lnc2 = { "1", NULL, "2", NRT_SUCCESS, NULL }; /* physical 2 and 3 */
    CTEST_CHECK(nrt_test_in_child(child_init, &lnc2) == 0);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_cores, default_lock_directory_is_private)
{
    CTEST_CHECK(nrt_test_open(&api));
    if (!nrt_test_is_emulator(&api)) {
        nrt_test_close(&api);
        CTEST_SKIP("emulator lock files");
    }
    char dir[512];
    const char *tmp = getenv("TEST_TMPDIR");
    if (tmp == NULL) {
        nrt_test_close(&api);
        CTEST_SKIP("needs TEST_TMPDIR");
    }
    snprintf(dir, sizeof(dir), "%s/default-tmp", tmp);
    mkdir(dir, 0755);
    char saved_tmpdir[512] = "";
    if (getenv("TMPDIR") != NULL)
        snprintf(saved_tmpdir, sizeof(saved_tmpdir), "%s", getenv("TMPDIR"));
    unsetenv("NEURON_EMU_LOCK_DIR");
    setenv("TMPDIR", dir, 1);
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    char lockdir[600];
    snprintf(lockdir, sizeof(lockdir), "%s/neuron-emu-%lu", dir, (unsigned long)geteuid());
    struct stat st;
    CTEST_CHECK(stat(lockdir, &st) == 0 && S_ISDIR(st.st_mode));
    CTEST_CHECK((st.st_mode & 0777) == 0700);
    char lockfile[700];
    snprintf(lockfile, sizeof(lockfile), "%s/trn1.32xlarge.nc0.lock", lockdir);
    bool lockfile_exists = stat(lockfile, &st) == 0;
    api.close();
    /* A lock directory that others can write to is refused. */
    bool chmod_ok = chmod(lockdir, 0777) == 0;
    NRT_STATUS refused = nrt_test_init(&api);
    chmod(lockdir, 0700);
    if (saved_tmpdir[0] != '\0')
        setenv("TMPDIR", saved_tmpdir, 1);
    else
        unsetenv("TMPDIR");
    nrt_test_close(&api);
    CTEST_CHECK(lockfile_exists && chmod_ok);
    CTEST_CHECK(refused == NRT_FAILURE);
    return CTEST_PASS;
}

/* ---- emulated instances (NEURON_EMU_INSTANCE_ID) ---- */

/* Separate emulated machines own their cores independently, as separate Trainium instances do;
 * the processes of one machine still exclude each other. */
CTEST(nrt_cores, instances_own_their_cores_independently)
{
    CTEST_CHECK(nrt_test_open(&api));
    if (!nrt_test_is_emulator(&api)) {
        nrt_test_close(&api);
        CTEST_SKIP("emulated instances");
    }
    setenv("NEURON_EMU_INSTANCE_ID", "machine-a", 1);
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    /* Another process of machine-a cannot have core 0, or all the cores... */
    child_init_t same = { "0", NULL, NULL, NRT_FAILURE, "machine-a" };
    CTEST_CHECK(nrt_test_in_child(child_init, &same) == 0);
    child_init_t all = { NULL, NULL, NULL, NRT_FAILURE, "machine-a" };
    CTEST_CHECK(nrt_test_in_child(child_init, &all) == 0);
    child_init_t next = { NULL, "1", NULL, NRT_SUCCESS, "machine-a" };
    CTEST_CHECK(nrt_test_in_child(child_init, &next) == 0);
    /* ...but core 0 of another machine, and of the default one, is free. */
    child_init_t other = { "0", NULL, NULL, NRT_SUCCESS, "machine-b" };
    CTEST_CHECK(nrt_test_in_child(child_init, &other) == 0);
    child_init_t other_all = { NULL, NULL, NULL, NRT_SUCCESS, "machine-b" };
    CTEST_CHECK(nrt_test_in_child(child_init, &other_all) == 0);
    child_init_t unset = { "0", NULL, NULL, NRT_SUCCESS, "" }; /* empty counts as unset */
    CTEST_CHECK(nrt_test_in_child(child_init, &unset) == 0);
    /* Each machine's locks live in its own directory below the lock directory. */
    char lock_dir[512], path[1024];
    if (getenv("NEURON_EMU_LOCK_DIR") != NULL)
        snprintf(lock_dir, sizeof(lock_dir), "%s", getenv("NEURON_EMU_LOCK_DIR"));
    else
        snprintf(lock_dir, sizeof(lock_dir), "%s/neuron-emu-%lu",
                 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : P_tmpdir, (unsigned long)geteuid());
    struct stat st;
    snprintf(path, sizeof(path), "%s/machine-a/trn1.32xlarge.nc0.lock", lock_dir);
    CTEST_CHECK(stat(path, &st) == 0);
    snprintf(path, sizeof(path), "%s/machine-b", lock_dir);
    CTEST_CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
    nrt_test_close(&api);
    return CTEST_PASS;
}

/* Two processes of one machine, both holding cores: the second's refusal names the owner and
 * the machine, so a user sees whose cores they are and how to get a machine of their own. */
static int child_busy_message(void *arg)
{
    (void)arg;
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    setenv("NEURON_EMU_INSTANCE_ID", "machine-a", 1);
    nrt_test_stderr_begin();
    NRT_STATUS status = nrt_test_init(&api);
    const char *err = nrt_test_stderr_end();
    char owner[64];
    snprintf(owner, sizeof(owner), "owned by process %ld", (long)getppid());
    return status == NRT_FAILURE && strstr(err, owner) != NULL &&
                   strstr(err, "NEURON_EMU_INSTANCE_ID=machine-a") != NULL
               ? 0
               : 1;
}

CTEST(nrt_cores, a_busy_core_names_its_owner_and_instance)
{
    CTEST_CHECK(nrt_test_open(&api));
    if (!nrt_test_is_emulator(&api)) {
        nrt_test_close(&api);
        CTEST_SKIP("emulated instances");
    }
    setenv("NEURON_EMU_INSTANCE_ID", "machine-a", 1);
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    CTEST_CHECK(nrt_test_in_child(child_busy_message, NULL) == 0);
    nrt_test_close(&api);
    return CTEST_PASS;
}

CTEST(nrt_cores, malformed_instance_ids_are_rejected)
{
    static const char *const bad[] = {
        ".",
        "..",
        ".hidden",
        "a/b",
        "../escape",
        "a b",
        "tab\t",
        "\xc3\xbc",
        "x123456789x123456789x123456789x123456789x123456789x123456789x1234", /* 65 */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CTEST_CHECK(nrt_test_open(&api));
        if (!nrt_test_is_emulator(&api)) {
            nrt_test_close(&api);
            CTEST_SKIP("emulated instances");
        }
        setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
        setenv("NEURON_EMU_INSTANCE_ID", bad[i], 1);
        nrt_test_stderr_begin();
        NRT_STATUS status = nrt_test_init(&api);
        const char *err = nrt_test_stderr_end();
        if (status != NRT_INVALID)
            fprintf(stderr, "NEURON_EMU_INSTANCE_ID=\"%s\" was accepted\n", bad[i]);
        CTEST_CHECK(status == NRT_INVALID);
        CTEST_CHECK(strstr(err, "NEURON_EMU_INSTANCE_ID") != NULL);
        nrt_test_close(&api);
    }
    /* The longest id, and every allowed character. */
    CTEST_CHECK(nrt_test_open(&api));
    setenv("NEURON_RT_VISIBLE_CORES", "0", 1);
    setenv("NEURON_EMU_INSTANCE_ID",
           "x123456789x123456789x123456789x123456789x123456789x123456789x123", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    api.close();
    setenv("NEURON_EMU_INSTANCE_ID", "Az09._-z", 1);
    CTEST_CHECK(nrt_test_init(&api) == NRT_SUCCESS);
    nrt_test_close(&api);
    return CTEST_PASS;
}
