/*
 * net/sleepers.c, the waiting threads of the tcp channel: which sleeper each claim takes
 * off the list, that a claimed sleeper wakes whether the wake comes before or after it
 * sleeps, and that an unclaimed one gives up at its deadline.
 */
#include "net/sleepers.h"
#include "common/test_util.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdint.h>

static struct ddss_tp_req reqs[4];
static struct ddss_sleeper sl[4];

/* sl[i] waits for reqs[i], none done; the list is sl[3] -> sl[2] -> sl[1] -> sl[0]. */
static struct ddss_sleeper *fresh_list(void)
{
	struct ddss_sleeper *list = NULL;

	for (int i = 0; i < 4; i++) {
		reqs[i] = (struct ddss_tp_req){ 0 };
		sl[i] = (struct ddss_sleeper){ .req = &reqs[i] };
		ddss_sleeper_link(&list, &sl[i]);
	}
	return list;
}

static int length(const struct ddss_sleeper *list)
{
	int n = 0;

	for (; list; list = list->next)
		n++;
	return n;
}

static bool on_list(const struct ddss_sleeper *list, const struct ddss_sleeper *s)
{
	for (; list; list = list->next)
		if (list == s)
			return true;
	return false;
}

static void test_claim_req(void)
{
	struct ddss_sleeper *list = fresh_list();
	struct ddss_tp_req other = { 0 };

	CU_ASSERT_PTR_EQUAL(ddss_sleepers_claim_req(&list, &reqs[1]), &sl[1]);
	CU_ASSERT(ddss_sleeper_claimed(&sl[1]));
	CU_ASSERT_FALSE(on_list(list, &sl[1]));
	CU_ASSERT_EQUAL(length(list), 3);
	for (int i = 0; i < 4; i++)
		if (i != 1)
			CU_ASSERT_FALSE(ddss_sleeper_claimed(&sl[i]));
	/* Nobody waits for it (any more): nothing changes. */
	CU_ASSERT_PTR_NULL(ddss_sleepers_claim_req(&list, &reqs[1]));
	CU_ASSERT_PTR_NULL(ddss_sleepers_claim_req(&list, &other));
	CU_ASSERT_EQUAL(length(list), 3);
	/* The head and the tail. */
	CU_ASSERT_PTR_EQUAL(ddss_sleepers_claim_req(&list, &reqs[3]), &sl[3]);
	CU_ASSERT_PTR_EQUAL(ddss_sleepers_claim_req(&list, &reqs[0]), &sl[0]);
	CU_ASSERT_PTR_EQUAL(list, &sl[2]);
	CU_ASSERT_PTR_NULL(sl[2].next);
}

static void test_claim_pending(void)
{
	struct ddss_sleeper *list = fresh_list();
	struct ddss_sleeper any = { .req = NULL };

	reqs[3].done = 1;
	reqs[2].done = 1;
	/* Done ones are skipped (their requester is woken for that, not to take over). */
	CU_ASSERT_PTR_EQUAL(ddss_sleepers_claim_pending(&list), &sl[1]);
	CU_ASSERT_FALSE(ddss_sleeper_claimed(&sl[3]));
	CU_ASSERT_FALSE(ddss_sleeper_claimed(&sl[2]));
	reqs[0].done = 1;
	CU_ASSERT_PTR_NULL(ddss_sleepers_claim_pending(&list));
	CU_ASSERT_EQUAL(length(list), 3);
	/* A sleeper waiting for any completion always counts as pending. */
	ddss_sleeper_link(&list, &any);
	CU_ASSERT_PTR_EQUAL(ddss_sleepers_claim_pending(&list), &any);
	CU_ASSERT_EQUAL(length(list), 3);
}

static void test_unlink_and_wake_all(void)
{
	struct ddss_sleeper *list = fresh_list();
	struct ddss_sleeper stranger = { .req = NULL };

	ddss_sleeper_unlink(&list, &sl[2]);
	CU_ASSERT_FALSE(on_list(list, &sl[2]));
	CU_ASSERT_FALSE(ddss_sleeper_claimed(&sl[2])); /* it left by itself */
	CU_ASSERT_EQUAL(length(list), 3);
	ddss_sleeper_unlink(&list, &stranger); /* not on it: nothing happens */
	CU_ASSERT_EQUAL(length(list), 3);
	ddss_sleepers_wake_all(&list);
	CU_ASSERT_PTR_NULL(list);
	CU_ASSERT(ddss_sleeper_claimed(&sl[0]));
	CU_ASSERT(ddss_sleeper_claimed(&sl[1]));
	CU_ASSERT(ddss_sleeper_claimed(&sl[3]));
	CU_ASSERT_FALSE(ddss_sleeper_claimed(&sl[2]));
}

struct waiter {
	struct ddss_sleeper *me;
	int64_t deadline;
	bool claimed;
};

static void *wait_main(void *arg)
{
	struct waiter *w = arg;

	w->claimed = ddss_sleeper_wait(w->me, w->deadline);
	return NULL;
}

/* Claimed and woken by another thread, before or while it sleeps: it returns true well
 * before its deadline (a lost wake-up would make it return false after 10 s). */
static void test_wait_woken(void)
{
	struct ddss_sleeper *list = NULL, me = { .req = &reqs[0] };
	struct waiter w = { .me = &me, .deadline = ddss_now_ns() + 10 * 1000000000ll };
	struct ddss_sleeper *s;
	pthread_t t;

	ddss_sleeper_link(&list, &me);
	CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, wait_main, &w), 0);
	s = ddss_sleepers_claim_req(&list, &reqs[0]);
	CU_ASSERT_PTR_EQUAL(s, &me);
	if (s)
		ddss_sleeper_wake(s);
	pthread_join(t, NULL);
	CU_ASSERT(w.claimed);
	CU_ASSERT(ddss_now_ns() < w.deadline);
}

static void test_wait_deadline(void)
{
	struct ddss_sleeper *list = NULL, me = { .req = &reqs[0] };
	int64_t t0 = ddss_now_ns();

	ddss_sleeper_link(&list, &me);
	CU_ASSERT_FALSE(ddss_sleeper_wait(&me, t0 - 1)); /* already past */
	CU_ASSERT_FALSE(ddss_sleeper_wait(&me, t0 + 50 * 1000000));
	CU_ASSERT(ddss_now_ns() - t0 >= 50 * 1000000);
	CU_ASSERT_PTR_EQUAL(list, &me); /* still linked: the caller unlinks it */
	ddss_sleeper_unlink(&list, &me);
	CU_ASSERT_PTR_NULL(list);
}

int main(void)
{
	CU_pSuite s;
	unsigned failed;

	if (CU_initialize_registry() != CUE_SUCCESS)
		return 1;
	s = CU_add_suite("sleepers", NULL, NULL);
	CU_add_test(s, "claim the sleeper of a request", test_claim_req);
	CU_add_test(s, "claim one whose request is pending", test_claim_pending);
	CU_add_test(s, "unlink, wake all", test_unlink_and_wake_all);
	CU_add_test(s, "a claimed sleeper wakes", test_wait_woken);
	CU_add_test(s, "an unclaimed sleeper gives up at its deadline", test_wait_deadline);
	failed = test_run_all();
	CU_cleanup_registry();
	return failed ? 1 : 0;
}
