/* nvtx_recorder: an NVTX injection library for the tests, built as a shared object and named by
 * NVTX_INJECTION64_PATH, as compute-sanitizer names its own. It implements the two entry points
 * of NVTX's injection protocol (InitializeInjectionNvtx2 for the core API, with
 * nvtxDomainCreateA and nvtxInitialize; InitializeInjectionNvtxExtension for the memory
 * extension, with heap register/unregister/reset and regions register/unregister) and appends
 * one line per call to the file NVTX_RECORDER_OUT:
 *
 *   loaded PID
 *   core PID version=V
 *   initialize PID
 *   domain PID NAME HANDLE
 *   mem PID module=M compat=C segments=N segment=ID slots=K
 *   heap_register PID HANDLE DOMAIN base=0xA size=N usage=U type=T name=NAME
 *   heap_unregister PID HANDLE
 *   heap_reset PID HANDLE
 *   region_register PID HEAP addr=0xA size=N
 *   region_unregister PID addr=0xA
 *
 * NVTX_RECORDER_FAIL makes it fail on purpose: "core" (InitializeInjectionNvtx2 returns 0),
 * "ext" (InitializeInjectionNvtxExtension returns 0), "heap:N" (the Nth heap registration, and
 * every later one, returns NULL). The file is written with O_APPEND and one write per line, so
 * forked children and threads interleave whole lines. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int out_fd = -1;
static int fail_core, fail_ext, fail_heap_from;
static long heaps_registered;

static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void record(const char *fmt, ...) {
    if (out_fd < 0) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(out_fd, line, (size_t)n);
    (void)w;
}

__attribute__((constructor)) static void on_load(void) {
    const char *path = getenv("NVTX_RECORDER_OUT");
    if (path && *path) out_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const char *fail = getenv("NVTX_RECORDER_FAIL");
    if (fail) {
        if (!strcmp(fail, "core")) fail_core = 1;
        if (!strcmp(fail, "ext")) fail_ext = 1;
        if (!strncmp(fail, "heap:", 5)) fail_heap_from = atoi(fail + 5);
    }
    record("loaded %d", (int)getpid());
}

/* ---- core ---- */

typedef const void *(*get_export_table_t)(uint32_t);
typedef struct {
    size_t struct_size;
    int (*get_module_function_table)(int module, void ***out_table, unsigned *out_size);
} callbacks_t;
typedef struct {
    size_t struct_size;
    uint32_t version;
    uint32_t reserved0;
    void (*set_injection_nvtx_version)(uint32_t);
} version_info_t;

static void my_initialize(const void *reserved) {
    record("initialize %d%s", (int)getpid(), reserved ? " non-null" : "");
}

static char domain_token;
static void *my_domain_create(const char *name) {
    record("domain %d %s %p", (int)getpid(), name ? name : "(null)", (void *)&domain_token);
    return &domain_token;
}

int InitializeInjectionNvtx2(get_export_table_t get) {
    const version_info_t *v = get(3);
    record("core %d version=%u", (int)getpid(), v ? v->version : 0);
    if (v && v->set_injection_nvtx_version) v->set_injection_nvtx_version(3);
    if (fail_core) return 0;
    const callbacks_t *cb = get(1);
    if (!cb || cb->struct_size < sizeof *cb) return 0;
    void **table = NULL;
    unsigned size = 0;
    /* CORE2 (5): DomainCreateA = 12, Initialize = 15. */
    if (!cb->get_module_function_table(5, (void ***)&table, &size) || size < 16) return 0;
    *(void **)table[12] = (void *)my_domain_create;
    *(void **)table[15] = (void *)my_initialize;
    return 1;
}

/* ---- memory extension ---- */

typedef struct {
    size_t segment_id, slot_count;
    intptr_t *function_slots;
} segment_t;
typedef struct {
    uint16_t nvtx_ver, struct_size, module_id, compat_id;
    size_t segments_count;
    segment_t *segments;
    void *get_export_function;
    const void *ext_info;
} module_info_t;

typedef struct {
    size_t size;
    const void *ptr;
} range_t;
typedef struct {
    uint16_t ext_compat_id, struct_size;
    uint32_t reserved0, usage, type;
    size_t type_specific_desc_size;
    const void *type_specific_desc;
    uint32_t category, message_type;
    const void *message;
} heap_desc_t;
typedef struct {
    uint16_t ext_compat_id, struct_size;
    uint32_t region_type;
    void *heap;
    size_t region_count, region_desc_element_size;
    const void *region_desc_elements;
    void **region_handle_elements_out;
} register_batch_t;
typedef struct {
    uint16_t ext_compat_id, struct_size;
    uint32_t ref_type;
    size_t ref_count, ref_element_size;
    const void *const *ref_elements;
} unregister_batch_t;

static void *my_heap_register(void *domain, const heap_desc_t *d) {
    long n = __atomic_add_fetch(&heaps_registered, 1, __ATOMIC_RELAXED);
    const range_t *r = d->type_specific_desc;
    if (fail_heap_from && n >= fail_heap_from) {
        record("heap_register %d (nil) %p base=%p size=%zu usage=%u type=%u name=%s refused", (int)getpid(),
               domain, r->ptr, r->size, d->usage, d->type, d->message_type == 1 ? (const char *)d->message : "-");
        return NULL;
    }
    /* A handle of the tool's own, not the heap's address. */
    void *h = (void *)(uintptr_t)(0x7e0000000000ull + (uint64_t)n * 16);
    record("heap_register %d %p %p base=%p size=%zu usage=%u type=%u name=%s", (int)getpid(), h, domain, r->ptr,
           r->size, d->usage, d->type, d->message_type == 1 ? (const char *)d->message : "-");
    return h;
}

static void my_heap_unregister(void *domain, void *heap) {
    (void)domain;
    record("heap_unregister %d %p", (int)getpid(), heap);
}

static void my_heap_reset(void *domain, void *heap) {
    (void)domain;
    record("heap_reset %d %p", (int)getpid(), heap);
}

static void my_regions_register(void *domain, const register_batch_t *b) {
    (void)domain;
    const range_t *r = b->region_desc_elements;
    for (size_t i = 0; i < b->region_count; i++)
        record("region_register %d %p addr=%p size=%zu", (int)getpid(), b->heap, r[i].ptr, r[i].size);
}

static void my_regions_unregister(void *domain, const unregister_batch_t *b) {
    (void)domain;
    for (size_t i = 0; i < b->ref_count; i++)
        record("region_unregister %d addr=%p", (int)getpid(), b->ref_elements[i]);
}

int InitializeInjectionNvtxExtension(module_info_t *m) {
    record("mem %d module=%u compat=%u segments=%zu segment=%zu slots=%zu", (int)getpid(), m->module_id, m->compat_id,
           m->segments_count, m->segments_count ? m->segments[0].segment_id : 0,
           m->segments_count ? m->segments[0].slot_count : 0);
    if (fail_ext) return 0;
    if (m->module_id != 1 || m->segments_count < 1 || m->segments[0].slot_count < 7) return 0;
    intptr_t *slots = m->segments[0].function_slots;
    slots[1] = (intptr_t)my_heap_register;
    slots[2] = (intptr_t)my_heap_unregister;
    slots[3] = (intptr_t)my_heap_reset;
    slots[4] = (intptr_t)my_regions_register;
    slots[6] = (intptr_t)my_regions_unregister;
    return 1;
}
