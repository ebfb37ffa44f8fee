/* shared_writer: the files a process under the shim writes for its user, on demand
 * (tests/it/shared_files.rs). It allocates SIZE_MIB MiB on device 0, then holds it HOLD_MS
 * milliseconds (long enough for the shim's sampling to see it cross CUGUARD_WARN_AT, so that an
 * alert is written), then, with SNAPSHOT, writes a snapshot there through the in-process API
 * (`cuguard_snapshot`), and exits 0 keeping the memory (a leak in the report) or 3 if the
 * snapshot was refused.
 *
 *     shared_writer SIZE_MIB [HOLD_MS [SNAPSHOT]]
 */
#include <dlfcn.h>

#include "workload.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: shared_writer SIZE_MIB [HOLD_MS [SNAPSHOT]]\n");
        return 2;
    }
    CHECK(cuInit(0));
    wl_primary(0);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, (size_t)atoi(argv[1]) << 20));
    if (argc > 2) usleep((useconds_t)atoi(argv[2]) * 1000);
    if (argc > 3) {
        int (*snap)(const char *, char **) = (int (*)(const char *, char **))dlsym(RTLD_DEFAULT, "cuguard_snapshot");
        void (*release)(char *) = (void (*)(char *))dlsym(RTLD_DEFAULT, "cuguard_free");
        if (!snap || !release) return 4;
        char *json = NULL;
        int r = snap(argv[3], &json);
        release(json);
        if (r != 0) return 3;
    }
    return 0;
}
