/* pool_queries: what the program learns about its allocations by asking the driver. With the
 * pool on, the answers must be those of the driver with the pool off (except that an IPC export
 * of a pooled pointer is refused). Prints one "name value" line per answer. */
#include "workload.h"

#define SHOW(label, fmt, ...) printf("%-28s " fmt "\n", label, __VA_ARGS__)

int main(void) {
    CHECK(cuInit(0));
    CUcontext ctx = wl_primary(0);
    size_t free0, total;
    CHECK(cuMemGetInfo(&free0, &total));

    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, 1000));
    CHECK(cuMemAlloc(&b, 3 << 20));
    CUdeviceptr base = 0;
    size_t size = 0;
    SHOW("range_interior", "%d", (int)cuMemGetAddressRange(&base, &size, a + 100));
    SHOW("range_interior_base", "%lld", (long long)(base - a));
    SHOW("range_interior_size", "%zu", size);
    SHOW("range_end", "%d", (int)cuMemGetAddressRange(&base, &size, b + (3 << 20) - 1));
    SHOW("range_end_base", "%lld", (long long)(base - b));
    SHOW("range_end_size", "%zu", size);

    CUdeviceptr start = 0;
    size_t rsize = 0;
    SHOW("attr_start", "%d", (int)cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 999));
    SHOW("attr_start_offset", "%lld", (long long)(start - a));
    SHOW("attr_size", "%d", (int)cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + 999));
    SHOW("attr_size_value", "%zu", rsize);
    unsigned long long id_a = 0, id_b = 0;
    cuPointerGetAttribute(&id_a, CU_POINTER_ATTRIBUTE_BUFFER_ID, a);
    cuPointerGetAttribute(&id_b, CU_POINTER_ATTRIBUTE_BUFFER_ID, b);
    SHOW("buffer_ids_differ", "%d", id_a != id_b);
    CUcontext owner = NULL;
    SHOW("attr_context", "%d", (int)cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, b + 5));
    SHOW("attr_context_is_current", "%d", owner == ctx);

    CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                    CU_POINTER_ATTRIBUTE_CONTEXT};
    CUdeviceptr s2 = 0;
    size_t z2 = 0;
    CUcontext c2 = NULL;
    void *data[3] = {&s2, &z2, &c2};
    SHOW("attrs", "%d", (int)cuPointerGetAttributes(3, attrs, data, b + 4096));
    SHOW("attrs_start_offset", "%lld", (long long)(s2 - b));
    SHOW("attrs_size", "%zu", z2);
    SHOW("attrs_context_is_current", "%d", c2 == ctx);

    size_t free1;
    CHECK(cuMemGetInfo(&free1, &total));
    SHOW("info_used_by_two", "%d", free0 - free1 >= 1000 + (3 << 20));
    CHECK(cuMemFree(a));
    CHECK(cuMemFree(b));
    size_t free2;
    CHECK(cuMemGetInfo(&free2, &total));
    SHOW("info_all_back", "%d", free2 == free0);
    SHOW("range_after_free", "%d", (int)cuMemGetAddressRange(&base, &size, b));

    CUdeviceptr c;
    CHECK(cuMemAlloc(&c, 1 << 20));
    CUipcMemHandle h;
    SHOW("ipc_export", "%d", (int)cuIpcGetMemHandle(&h, c));
    CHECK(cuMemFree(c));
    return 0;
}
