/*
 * test_hostfile.c — --hosts FILE as the supervisor reads it: both MPIs' syntaxes, comments,
 * one machine per host name, every malformed line refused with its line number, and the
 * ranks per machine as mpiexec maps N ranks onto the slots (in file order, wrapping).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../cmd/hostfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* text into a fresh file in a private directory; its path into path */
static void write_file(char *dir, char *path, size_t len, const char *text)
{
    snprintf(path, len, "%s/hosts", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static int read_text(const char *text, host_list *h, char *err, size_t errlen)
{
    char dir[] = "/tmp/aebench-hostfile.XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    write_file(dir, path, sizeof path, text);
    const int rc = host_list_read(path, h, err, errlen);
    unlink(path);
    rmdir(dir);
    return rc;
}

static void test_both_syntaxes_and_comments(void **state)
{
    (void)state;
    host_list *h = malloc(sizeof *h);
    char err[512];
    assert_int_equal(read_text("# the cluster\n\nnode1:4\nnode2 slots=8 max_slots=8  # Open MPI\n  node3\n", h, err,
                               sizeof err), 0);
    assert_int_equal(h->n, 3);
    assert_string_equal(h->name[0], "node1");
    assert_int_equal(h->slots[0], 4);
    assert_string_equal(h->name[1], "node2");
    assert_int_equal(h->slots[1], 8);
    assert_string_equal(h->name[2], "node3");
    assert_int_equal(h->slots[2], 1);
    /* a host named twice is one machine: its slots add up */
    assert_int_equal(read_text("a:2\nb:2\na:2\n", h, err, sizeof err), 0);
    assert_int_equal(h->n, 2);
    assert_int_equal(h->slots[0], 4);
    free(h);
}

static void test_malformed_lines_named(void **state)
{
    (void)state;
    static const struct { const char *text, *says; } bad[] = {
        {"ok:2\nnode:0\n", "line 2: the slots after ':' are not a count"},
        {"node:-1\n", "line 1: the slots after ':' are not a count"},
        {"node:2x\n", "line 1: the slots after ':' are not a count"},
        {"node:70000\n", "line 1: the slots after ':' are not a count"},
        {"node slots=\n", "line 1: slots= is not a count"},
        {"node:2 slots=2\n", "line 1: slots given twice"},
        {"node other\n", "line 1: more than one host on the line"},
        {"no/de\n", "line 1: not a host name"},
        {"\n# only comments\n", "lists no machine"},
    };
    host_list *h = malloc(sizeof *h);
    char err[512];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(read_text(bad[i].text, h, err, sizeof err), -1);
        if (!strstr(err, bad[i].says)) fail_msg("'%s': said '%s', want '%s'", bad[i].text, err, bad[i].says);
    }
    /* not a file: a directory, and a missing one */
    assert_int_equal(host_list_read("/tmp", h, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file"));
    assert_int_equal(host_list_read("/nonexistent/aebench/hosts", h, err, sizeof err), -1);
    free(h);
}

static void test_ranks_per_machine_as_mpiexec_maps(void **state)
{
    (void)state;
    host_list *h = calloc(1, sizeof *h);
    h->n = 2;
    strcpy(h->name[0], "a"), strcpy(h->name[1], "b");
    h->slots[0] = 2, h->slots[1] = 2;
    int used = 0;
    assert_int_equal(host_list_ranks_per_machine(h, 4, &used), 2);
    assert_int_equal(used, 2);
    assert_int_equal(host_list_ranks_per_machine(h, 2, &used), 2); /* both on the first */
    assert_int_equal(used, 1);
    assert_int_equal(host_list_ranks_per_machine(h, 3, &used), 2);
    assert_int_equal(used, 2);
    assert_int_equal(host_list_ranks_per_machine(h, 6, &used), 4); /* wraps: a takes 0,1,4,5 */
    h->slots[0] = 8, h->slots[1] = 1;
    assert_int_equal(host_list_ranks_per_machine(h, 9, &used), 8);
    assert_int_equal(used, 2);
    free(h);
}

static void test_this_machine(void **state)
{
    (void)state;
    char me[256];
    assert_int_equal(gethostname(me, sizeof me), 0);
    me[sizeof me - 1] = '\0';
    assert_true(host_is_this_machine(me));
    assert_true(host_is_this_machine("localhost"));
    assert_true(host_is_this_machine("127.0.0.1"));
    assert_false(host_is_this_machine("node-that-is-not-here.example"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_both_syntaxes_and_comments),
        cmocka_unit_test(test_malformed_lines_named),
        cmocka_unit_test(test_ranks_per_machine_as_mpiexec_maps),
        cmocka_unit_test(test_this_machine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
