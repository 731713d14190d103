/* The checks of the C ABI test programs (link_test.c, device_link_test.cpp), in C and C++:
 * each one counts, a failed one prints its line, what it checked, the values and NCCL's last
 * error, and `finish` prints the tally c_abi.rs reads and gives the exit status. */
#ifndef WEFT_NCCL_TEST_CHECKS_H
#define WEFT_NCCL_TEST_CHECKS_H

#include <nccl.h>
#include <stdio.h>
#include <string.h>

static int checks = 0, failures = 0;

static void report(int ok, const char* what, int line, long got, long want) {
  checks++;
  if (!ok) {
    failures++;
    const char* last = ncclGetLastError(NULL);
    fprintf(stderr, "FAIL line %d: %s: got %ld, want %ld (last error: %s)\n", line, what, got, want, last ? last : "(null)");
  }
}

#define CHECK(cond) report((cond), #cond, __LINE__, 0, 1)
#define EQ(a, b) report((long)(a) == (long)(b), #a " == " #b, __LINE__, (long)(a), (long)(b))
#define EXPECT(call, want) do { ncclResult_t r_ = (call); report(r_ == (want), #call, __LINE__, r_, (want)); } while (0)
/* The call fails with `want` and ncclGetLastError mentions `needle`. */
#define EXPECT_MSG(call, want, needle) do { \
    ncclResult_t r_ = (call); \
    report(r_ == (want), #call, __LINE__, r_, (want)); \
    const char* m_ = ncclGetLastError(NULL); \
    report(m_ != NULL && strstr(m_, (needle)) != NULL, "last error of " #call " mentions " needle, __LINE__, 0, 1); \
  } while (0)

/* Prints `<program>: N checks, M failed` and returns the program's exit status. */
static int finish(const char* program) {
  printf("%s: %d checks, %d failed\n", program, checks, failures);
  return failures == 0 ? 0 : 1;
}

#endif
