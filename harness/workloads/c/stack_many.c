/* stack_many: 100,000 leaked device blocks over 1,000 distinct call stacks, for measuring how
 * long the shim takes to symbolize and write a report of that size.
 *
 * 1,000 leaf functions each allocate one 256-byte block per call; 100 mid functions call 10
 * leaves each, 10 top functions call 10 mids each, and main calls the 10 tops 100 times. So
 * every leaf is reached through one stack of its own (leaf, mid, top, main, libc), seen 100
 * times. Prints `kept 100000` (or the count that failed). */
#include <stdio.h>

#include "cusim.h"

static int failures;

#define LEAF(n)                                                                                  \
    static __attribute__((noinline)) void leaf##n(void) {                                       \
        CUdeviceptr p;                                                                           \
        if (cuMemAlloc(&p, 256) != CUDA_SUCCESS) failures++;                                    \
    }
#define LEAVES10(n) LEAF(n##0) LEAF(n##1) LEAF(n##2) LEAF(n##3) LEAF(n##4) LEAF(n##5) LEAF(n##6) LEAF(n##7) LEAF(n##8) LEAF(n##9)
#define LEAVES100(n)                                                                             \
    LEAVES10(n##0) LEAVES10(n##1) LEAVES10(n##2) LEAVES10(n##3) LEAVES10(n##4) LEAVES10(n##5)     \
    LEAVES10(n##6) LEAVES10(n##7) LEAVES10(n##8) LEAVES10(n##9)
LEAVES100(0) LEAVES100(1) LEAVES100(2) LEAVES100(3) LEAVES100(4)
LEAVES100(5) LEAVES100(6) LEAVES100(7) LEAVES100(8) LEAVES100(9)

#define MID(n)                                                                                   \
    static __attribute__((noinline)) void mid##n(void) {                                        \
        leaf##n##0(); leaf##n##1(); leaf##n##2(); leaf##n##3(); leaf##n##4();                    \
        leaf##n##5(); leaf##n##6(); leaf##n##7(); leaf##n##8(); leaf##n##9();                    \
    }
#define MIDS10(n) MID(n##0) MID(n##1) MID(n##2) MID(n##3) MID(n##4) MID(n##5) MID(n##6) MID(n##7) MID(n##8) MID(n##9)
MIDS10(0) MIDS10(1) MIDS10(2) MIDS10(3) MIDS10(4) MIDS10(5) MIDS10(6) MIDS10(7) MIDS10(8) MIDS10(9)

#define TOP(n)                                                                                   \
    static __attribute__((noinline)) void top##n(void) {                                        \
        mid##n##0(); mid##n##1(); mid##n##2(); mid##n##3(); mid##n##4();                         \
        mid##n##5(); mid##n##6(); mid##n##7(); mid##n##8(); mid##n##9();                         \
    }
TOP(0) TOP(1) TOP(2) TOP(3) TOP(4) TOP(5) TOP(6) TOP(7) TOP(8) TOP(9)

int main(void) {
    if (cuInit(0) != CUDA_SUCCESS) return 1;
    CUdevice dev;
    CUcontext ctx;
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    for (int round = 0; round < 100; round++) {
        top0(); top1(); top2(); top3(); top4(); top5(); top6(); top7(); top8(); top9();
    }
    printf("kept %d\n", 100000 - failures);
    return failures != 0;
}
