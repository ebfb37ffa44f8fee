/* pool_peer: is a block freed in one context reused while another context's work still writes
 * it? Run on the simulator with CUGUARD_SIM_DEVICES=2. Context A is device 0's primary context,
 * B device 1's; B's late work runs on its non-blocking stream `sb`.
 *
 *   pool_peer MODE [TRIALS]
 *
 * Each trial of a write mode:
 *   1. A allocates BLOCKS blocks of SIZE (4 MiB: each a dedicated chunk of the pool, so that a
 *      block freed and asked for again is that same chunk, once the pool may reuse it);
 *   2. B queues, on sb, a stall (DELAY_US) and then work that writes 0xBB into every block;
 *   3. A frees them all (64 MiB: the pool records a fence), at once allocates as many of the same
 *      size again (the pool, finding its frees pending, synchronizes), sets them to 0xAA and
 *      waits for its own work;
 *   4. B waits for its work; A reads its new blocks back and counts the bytes that are not 0xAA.
 * The late writes must never land in the new blocks. Modes, by how B writes:
 *   peer_write   B enabled peer access to A; a simulated kernel per block (cusimEnqueueFill),
 *                then a 1-byte memset on sb: the submission a real kernel launch would count;
 *   peer_copy    no peer access; cuMemcpyPeerAsync(block <- B's 0xBB buffer) per block;
 *   unified_copy no peer access; cuMemcpyAsync (unified addresses) per block;
 *   disable      as peer_write, but B disables peer access right after queueing the writes
 *                (and enables it again for the next trial); after the trials, with access
 *                disabled and everything done, A frees and allocates without waiting;
 *   destroy      as peer_write, with B a created context destroyed right after queueing the
 *                writes (destroying waits for its work): nothing of B is left to wait for.
 * Prints {"mode":..., "trials":[{"same_blocks":N,"corrupted_bytes":N},...], ...}: same_blocks
 * counts the new blocks at the address of a freed one.
 *
 * After the trials, peer_write and disable add "b_busy_after": B stalls its stream for a second
 * while A frees and allocates with work of its own (its pool synchronizes), and whether B is
 * still busy after: false while B has access (A's pool waited for B's work), true once access
 * was disabled and a fence covered what B issued before.
 *
 *   control: C, a created context on device 1 that no other context reaches, allocates and frees
 *   TRIALS times alone in the process (nothing submitted: each free is reused at once); then,
 *   once B reaches A (after one peer_write trial) and while B's stream is stalled, TRIALS times
 *   with work before each free (the pool waits for C alone: B is still busy after). Prints
 *   {"alone":[same_address...],"peer_trial":[trial],"with_peers_same_address":bool,
 *   "b_busy_after":bool}.
 *
 *   sim: the simulated driver's peer entries and codes, as one JSON object of results. */
#include "workload.h"

#define SIZE (4 << 20)
#define BLOCKS 16
#define DELAY_US 30000

static unsigned char host[SIZE], want[SIZE];
static CUcontext A, B;
static CUstream sb;
static CUdeviceptr scratch_b, source_b;

static void use(CUcontext c) { CHECK(cuCtxSetCurrent(c)); }

static size_t count_not(CUdeviceptr p, unsigned char value) {
    CHECK(cuMemcpyDtoH(host, p, SIZE));
    memset(want, value, SIZE);
    if (!memcmp(host, want, SIZE)) return 0;
    size_t bad = 0;
    for (size_t i = 0; i < SIZE; i++) bad += host[i] != value;
    return bad;
}

/* B's stream, scratch byte and 0xBB source buffer, in B (current after). */
static void setup_b(void) {
    use(B);
    CHECK(cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&scratch_b, 256));
    CHECK(cuMemAlloc(&source_b, SIZE));
    CHECK(cusimEnqueueFill(0, source_b, SIZE, 0xBB, 0));
    CHECK(cuCtxSynchronize());
}

/* B (current) queues late writes of 0xBB into the blocks, by the mode's means. */
static void late_writes(const char *mode, CUdeviceptr *a) {
    CHECK(cusimEnqueueFill(sb, scratch_b, 1, 0, DELAY_US));
    for (int i = 0; i < BLOCKS; i++) {
        if (!strcmp(mode, "peer_copy"))
            CHECK(cuMemcpyPeerAsync(a[i], A, source_b, B, SIZE, sb));
        else if (!strcmp(mode, "unified_copy"))
            CHECK(cuMemcpyAsync(a[i], source_b, SIZE, sb));
        else
            CHECK(cusimEnqueueFill(sb, a[i], SIZE, 0xBB, 0));
    }
    if (strcmp(mode, "peer_copy") && strcmp(mode, "unified_copy")) CHECK(cuMemsetD8Async(scratch_b, 0, 1, sb));
}

static void trial(const char *mode, int first) {
    CUdeviceptr a[BLOCKS], n[BLOCKS];
    int destroy = !strcmp(mode, "destroy");
    use(A);
    for (int i = 0; i < BLOCKS; i++) CHECK(cuMemAlloc(&a[i], SIZE));
    if (destroy) {
        /* B exists only from here to its destroy, where A's pool does nothing: no fence of A can
         * legitimately wait for it (one taken while B can reach A would). */
        CUdevice d1;
        CHECK(cuDeviceGet(&d1, 1));
        CHECK(cuCtxCreate(&B, NULL, 0, d1));
        setup_b();
        CHECK(cuCtxEnablePeerAccess(A, 0));
    }
    use(B);
    late_writes(mode, a);
    if (!strcmp(mode, "disable")) CHECK(cuCtxDisablePeerAccess(A));
    if (destroy) CHECK(cuCtxDestroy(B));
    use(A);
    for (int i = 0; i < BLOCKS; i++) CHECK(cuMemFree(a[i]));
    for (int i = 0; i < BLOCKS; i++) {
        CHECK(cuMemAlloc(&n[i], SIZE));
        CHECK(cuMemsetD8(n[i], 0xAA, SIZE));
    }
    CHECK(cuCtxSynchronize());
    if (!destroy) {
        use(B);
        CHECK(cuCtxSynchronize());
        if (!strcmp(mode, "disable")) CHECK(cuCtxEnablePeerAccess(A, 0));
        use(A);
    }
    size_t bad = 0;
    int same = 0;
    for (int i = 0; i < BLOCKS; i++) {
        bad += count_not(n[i], 0xAA);
        for (int j = 0; j < BLOCKS; j++) same += n[i] == a[j];
    }
    printf("%s{\"same_blocks\":%d,\"corrupted_bytes\":%zu}", first ? "" : ",", same, bad);
    for (int i = 0; i < BLOCKS; i++) CHECK(cuMemFree(n[i]));
}

/* Alloc, (with work: set it on the legacy stream,) free, alloc (6 MiB: a dedicated chunk of a
 * size no trial uses, so that no idle chunk serves the second request): whether the same block
 * came back. Without work since the pool's last fence, the pool reuses it at once; with work,
 * after synchronizing the context (and whatever reaches it). */
#define REUSE_SIZE (6 << 20)
static int reuse(int work) {
    CUdeviceptr a, n;
    CHECK(cuMemAlloc(&a, REUSE_SIZE));
    if (work) CHECK(cuMemsetD8(a, 0x11, REUSE_SIZE));
    CHECK(cuMemFree(a));
    CHECK(cuMemAlloc(&n, REUSE_SIZE));
    CHECK(cuMemFree(n));
    return a == n;
}

/* B stalls its stream for a second; whether it is still busy after `ctx` ran `trials` reuses
 * with work (its pool waited for nothing of B's). Waits for B after. */
static int b_busy_after(CUcontext ctx, int trials, int *same) {
    use(B);
    CHECK(cusimEnqueueFill(sb, scratch_b, 1, 0, 1000000));
    use(ctx);
    *same = 1;
    for (int i = 0; i < trials; i++) *same &= reuse(1);
    use(B);
    CUresult q = cuStreamQuery(sb);
    CHECK(cuCtxSynchronize());
    use(ctx);
    return q == CUDA_ERROR_NOT_READY;
}

static void control(int trials) {
    CUdevice d1;
    CUcontext c;
    CHECK(cuDeviceGet(&d1, 1));
    CHECK(cuCtxCreate(&c, NULL, 0, d1));
    printf("{\"alone\":[");
    for (int i = 0; i < trials; i++) printf("%s%s", i ? "," : "", reuse(0) ? "true" : "false");
    printf("],\"peer_trial\":[");
    A = wl_primary(0);
    B = wl_primary(1);
    setup_b();
    CHECK(cuCtxEnablePeerAccess(A, 0));
    trial("peer_write", 1);
    int same;
    int busy = b_busy_after(c, trials, &same);
    printf("],\"with_peers_same_address\":%s,\"b_busy_after\":%s}\n", same ? "true" : "false",
           busy ? "true" : "false");
}

static void sim(void) {
    CUdevice d0, d1;
    CHECK(cuDeviceGet(&d0, 0));
    CHECK(cuDeviceGet(&d1, 1));
    A = wl_primary(0);
    B = wl_primary(1);
    int can01 = -1, can00 = -1, can_bad = -1;
    CUresult bad_dev = cuDeviceCanAccessPeer(&can_bad, d0, 7);
    CHECK(cuDeviceCanAccessPeer(&can01, d0, d1));
    CHECK(cuDeviceCanAccessPeer(&can00, d0, d0));
    CUdeviceptr a, b;
    use(A);
    CHECK(cuMemAlloc(&a, SIZE));
    CUresult self = cuCtxEnablePeerAccess(A, 0);
    use(B);
    CHECK(cuMemAlloc(&b, SIZE));
    CUresult fill_without = cusimEnqueueFill(0, a, SIZE, 0x22, 0);
    CUresult disable_never = cuCtxDisablePeerAccess(A);
    CUresult flags = cuCtxEnablePeerAccess(A, 1);
    CUresult null_ctx = cuCtxEnablePeerAccess(NULL, 0);
    CUresult enable = cuCtxEnablePeerAccess(A, 0);
    CUresult again = cuCtxEnablePeerAccess(A, 0);
    CUresult fill_with = cusimEnqueueFill(0, a, SIZE, 0x33, 0);
    CHECK(cuCtxSynchronize());
    use(A);
    size_t filled = SIZE - count_not(a, 0x33);
    CUresult one_way = cusimEnqueueFill(0, b, SIZE, 0x44, 0);
    use(B);
    CUresult disable = cuCtxDisablePeerAccess(A);
    CUresult disable_again = cuCtxDisablePeerAccess(A);
    CUresult fill_after = cusimEnqueueFill(0, a, SIZE, 0x55, 0);
    /* Peer copies need no peer access. */
    CHECK(cusimEnqueueFill(0, b, SIZE, 0x66, 0));
    CUresult copy = cuMemcpyPeer(a, A, b, B, SIZE);
    CUresult copy_async = cuMemcpyPeerAsync(a, A, b, B, SIZE, sb);
    CHECK(cuCtxSynchronize());
    use(A);
    size_t copied = SIZE - count_not(a, 0x66);
    CUresult copy_null = cuMemcpyPeer(a, NULL, b, B, SIZE);
    /* Access ends with the peer context. */
    CUcontext c;
    CHECK(cuCtxCreate(&c, NULL, 0, d1));
    CHECK(cuCtxEnablePeerAccess(A, 0));
    CHECK(cuCtxDestroy(c));
    use(B);
    CHECK(cuCtxEnablePeerAccess(A, 0));
    CUresult after_reset = CUDA_SUCCESS;
    CHECK(cuDevicePrimaryCtxReset(d0));
    A = wl_primary(0);
    use(B);
    after_reset = cuCtxDisablePeerAccess(A);
    printf("{\"can_access_0_1\":%d,\"can_access_0_0\":%d,\"can_access_bad_device\":%d,"
           "\"enable_self\":%d,\"fill_without_access\":%d,\"disable_never_enabled\":%d,"
           "\"enable_bad_flags\":%d,\"enable_null\":%d,\"enable\":%d,\"enable_again\":%d,"
           "\"fill_with_access\":%d,\"filled_bytes\":%zu,\"fill_the_other_way\":%d,\"disable\":%d,"
           "\"disable_again\":%d,\"fill_after_disable\":%d,\"copy_peer\":%d,\"copy_peer_async\":%d,"
           "\"copied_bytes\":%zu,\"copy_null_context\":%d,\"disable_after_peer_reset\":%d}\n",
           can01, can00, (int)bad_dev, (int)self, (int)fill_without, (int)disable_never, (int)flags,
           (int)null_ctx, (int)enable, (int)again, (int)fill_with, filled, (int)one_way, (int)disable,
           (int)disable_again, (int)fill_after, (int)copy, (int)copy_async, copied, (int)copy_null,
           (int)after_reset);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "peer_write";
    int trials = argc > 2 ? atoi(argv[2]) : 20;
    CHECK(cuInit(0));
    if (!strcmp(mode, "control")) {
        control(trials);
        return 0;
    }
    if (!strcmp(mode, "sim")) {
        sb = 0;
        sim();
        return 0;
    }
    A = wl_primary(0);
    if (strcmp(mode, "destroy")) {
        B = wl_primary(1);
        setup_b();
        if (!strcmp(mode, "peer_write") || !strcmp(mode, "disable")) CHECK(cuCtxEnablePeerAccess(A, 0));
    }
    printf("{\"mode\":\"%s\",\"trials\":[", mode);
    for (int i = 0; i < trials; i++) trial(mode, i == 0);
    printf("]");
    if (!strcmp(mode, "disable")) {
        /* Access disabled for good, and everything done: once a fence covered what B issued
         * before, A's pool no longer waits for B. */
        use(B);
        CHECK(cuCtxDisablePeerAccess(A));
        CHECK(cuCtxSynchronize());
        use(A);
        reuse(1);
        int same;
        printf(",\"b_busy_after\":%s", b_busy_after(A, 1, &same) ? "true" : "false");
    }
    if (!strcmp(mode, "peer_write")) {
        /* While B has access, A's pool waits for B's work (here a stall): B is idle after. */
        int same;
        printf(",\"b_busy_after\":%s", b_busy_after(A, 1, &same) ? "true" : "false");
    }
    printf("}\n");
    return 0;
}
