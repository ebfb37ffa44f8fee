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
 *   error PID WHAT             a call compute-sanitizer would refuse (the tests fail on it)
 *
 * It is as strict as compute-sanitizer's memcheck is documented to be (SanitizerNvtxGuide,
 * nvToolsExtMem.h), and keeps books to be so: every structure must have its extension's
 * compatibility id (0x0102) and the headers' size, heaps usage SUB_ALLOCATOR and type
 * VIRTUAL_ADDRESS; the domain must be the one nvtxDomainCreateA gave (NULL only when no core
 * tool was attached, as the headers then pass); a heap must be exactly one live allocation of the
 * driver ("Any allocation created with cudaMalloc can be registered as a memory pool"), and the
 * driver must still hold it when the heap is unregistered ("calling cudaFree on a memory pool
 * causes Compute Sanitizer to automatically unregister it": an unregistration afterwards names a
 * heap the tool no longer has); a heap handle must be one it gave and has not taken back; a
 * region must lie inside its heap and overlap no live region; an unregistered region must be
 * live. Stricter than the header on one point, which the pool keeps anyway: a heap is
 * unregistered only once its regions are (the header lets the heap take them). The driver is
 * asked through the library already loaded as libcuda.so.1 (the simulated driver in the tests),
 * not through the shim's exports.
 *
 * NVTX_RECORDER_FAIL makes it fail on purpose: "core" (InitializeInjectionNvtx2 returns 0),
 * "ext" (InitializeInjectionNvtxExtension returns 0), "heap:N" (the Nth heap registration, and
 * every later one, returns NULL). The file is written with O_APPEND and one write per line, so
 * forked children and threads interleave whole lines. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void child_books(void);
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
    pthread_atfork(NULL, NULL, child_books);
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
static int domain_made;
static void *my_domain_create(const char *name) {
    record("domain %d %s %p", (int)getpid(), name ? name : "(null)", (void *)&domain_token);
    __atomic_store_n(&domain_made, 1, __ATOMIC_RELEASE);
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

/* ---- the tool's books ---- */

#define COMPAT 0x0102
#define MAX_HEAPS 4096
#define MAX_REGIONS 65536

static pthread_mutex_t books = PTHREAD_MUTEX_INITIALIZER;
static struct heap {
    void *handle;
    uintptr_t base, end;
    unsigned long long id; /* the driver's buffer id of its allocation (0: no driver to ask) */
} heaps[MAX_HEAPS];
static int nheaps;
static struct region {
    uintptr_t addr, end;
    void *heap;
} regions[MAX_REGIONS];
static int nregions;

#define ERROR(...) record("error %d " __VA_ARGS__)

/* A forked child's pools are new: so are its books (the shim's are too). */
static void child_books(void) {
    pthread_mutex_init(&books, NULL);
    nheaps = nregions = 0;
}

static int find_heap(void *h) {
    for (int i = 0; i < nheaps; i++)
        if (heaps[i].handle == h) return i;
    return -1;
}

static int find_region(uintptr_t a) {
    for (int i = 0; i < nregions; i++)
        if (regions[i].addr == a) return i;
    return -1;
}

/* The driver's view of ptr: the allocation holding it (1, with its buffer id), none (0), or no
 * driver to ask (-1). */
typedef int (*range_fn)(uintptr_t *base, size_t *size, uintptr_t ptr);
typedef int (*attr_fn)(void *data, int attribute, uintptr_t ptr);
static int allocation(uintptr_t ptr, uintptr_t *base, size_t *size, unsigned long long *id) {
    static range_fn range;
    static attr_fn attr;
    static int looked;
    if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            range = (range_fn)dlsym(h, "cuMemGetAddressRange_v2");
            attr = (attr_fn)dlsym(h, "cuPointerGetAttribute");
        }
        __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
    }
    *id = 0;
    if (!range || !attr) return -1;
    if (range(base, size, ptr) != 0) return 0;
    if (attr(id, 7 /* CU_POINTER_ATTRIBUTE_BUFFER_ID */, ptr) != 0) return 0;
    return 1;
}

/* Whether the heap's allocation is still the one it was registered over: the tool drops a heap
 * whose allocation is freed. */
static int heap_alive(const struct heap *hp) {
    uintptr_t b = 0;
    size_t n = 0;
    unsigned long long id = 0;
    int a = allocation(hp->base, &b, &n, &id);
    return a < 0 || (a == 1 && id == hp->id);
}

/* Drops heap i and its regions (books locked). */
static void drop_heap(int i) {
    void *h = heaps[i].handle;
    heaps[i] = heaps[--nheaps];
    for (int k = 0; k < nregions;) {
        if (regions[k].heap == h) regions[k] = regions[--nregions];
        else k++;
    }
}

static int domain_ok(void *domain, const char *call) {
    void *want = __atomic_load_n(&domain_made, __ATOMIC_ACQUIRE) ? (void *)&domain_token : NULL;
    if (domain == want) return 1;
    ERROR("%s: domain %p is not the one the tool created (%p)", (int)getpid(), call, domain, want);
    return 0;
}

static void *my_heap_register(void *domain, const heap_desc_t *d) {
    long n = __atomic_add_fetch(&heaps_registered, 1, __ATOMIC_RELAXED);
    int pid = (int)getpid();
    if (!domain_ok(domain, "nvtxMemHeapRegister")) return NULL;
    if (!d || d->ext_compat_id != COMPAT || d->struct_size != sizeof *d) {
        ERROR("nvtxMemHeapRegister: compat %#x, struct size %u (want %#x, %zu)", pid, d ? d->ext_compat_id : 0,
              d ? d->struct_size : 0, COMPAT, sizeof *d);
        return NULL;
    }
    if (d->usage != 1 || d->type != 1 || d->type_specific_desc_size != sizeof(range_t) || !d->type_specific_desc) {
        ERROR("nvtxMemHeapRegister: usage %u type %u descriptor size %zu", pid, d->usage, d->type,
              d->type_specific_desc_size);
        return NULL;
    }
    const range_t *r = d->type_specific_desc;
    if (fail_heap_from && n >= fail_heap_from) {
        record("heap_register %d (nil) %p base=%p size=%zu usage=%u type=%u name=%s refused", pid, domain, r->ptr,
               r->size, d->usage, d->type, d->message_type == 1 ? (const char *)d->message : "-");
        return NULL;
    }
    uintptr_t base = (uintptr_t)r->ptr, end = base + r->size, ab = 0;
    size_t as = 0;
    unsigned long long id = 0;
    int alive = allocation(base, &ab, &as, &id);
    if (alive == 0 || (alive == 1 && (ab != base || as != r->size))) {
        ERROR("nvtxMemHeapRegister: [%p, +%zu) is not one allocation of the driver (%s %#lx, %zu bytes)", pid,
              r->ptr, r->size, alive ? "it is in" : "none at", (unsigned long)ab, as);
        return NULL;
    }
    /* A handle of the tool's own, not the heap's address. */
    void *h = (void *)(uintptr_t)(0x7e0000000000ull + (uint64_t)n * 16);
    pthread_mutex_lock(&books);
    for (int i = 0; i < nheaps;) {
        if (!(base < heaps[i].end && heaps[i].base < end)) {
            i++;
        } else if (!heap_alive(&heaps[i])) {
            drop_heap(i); /* its memory was freed: the tool dropped it then */
        } else {
            pthread_mutex_unlock(&books);
            ERROR("nvtxMemHeapRegister: [%p, +%zu) overlaps heap %p", pid, r->ptr, r->size, heaps[i].handle);
            return NULL;
        }
    }
    if (nheaps < MAX_HEAPS) heaps[nheaps++] = (struct heap){h, base, end, id};
    pthread_mutex_unlock(&books);
    record("heap_register %d %p %p base=%p size=%zu usage=%u type=%u name=%s", pid, h, domain, r->ptr, r->size,
           d->usage, d->type, d->message_type == 1 ? (const char *)d->message : "-");
    return h;
}

static void my_heap_unregister(void *domain, void *heap) {
    int pid = (int)getpid();
    if (!domain_ok(domain, "nvtxMemHeapUnregister")) return;
    pthread_mutex_lock(&books);
    int i = find_heap(heap);
    if (i < 0) {
        pthread_mutex_unlock(&books);
        ERROR("nvtxMemHeapUnregister: unknown heap %p", pid, heap);
        return;
    }
    struct heap hp = heaps[i];
    if (!heap_alive(&hp)) {
        drop_heap(i);
        pthread_mutex_unlock(&books);
        ERROR("nvtxMemHeapUnregister: heap %p's memory %#lx was freed already (the tool dropped it then)", pid, heap,
              (unsigned long)hp.base);
        return;
    }
    int inside = 0;
    for (int k = 0; k < nregions; k++) inside += regions[k].heap == heap;
    drop_heap(i);
    pthread_mutex_unlock(&books);
    if (inside) ERROR("nvtxMemHeapUnregister: heap %p still has %d regions", pid, heap, inside);
    record("heap_unregister %d %p", pid, heap);
}

static void my_heap_reset(void *domain, void *heap) {
    (void)domain;
    record("heap_reset %d %p", (int)getpid(), heap);
}

static void my_regions_register(void *domain, const register_batch_t *b) {
    int pid = (int)getpid();
    if (!domain_ok(domain, "nvtxMemRegionsRegister")) return;
    if (!b || b->ext_compat_id != COMPAT || b->struct_size != sizeof *b || b->region_type != 1 ||
        b->region_desc_element_size != sizeof(range_t)) {
        ERROR("nvtxMemRegionsRegister: compat %#x, struct size %u, type %u, element size %zu", pid,
              b ? b->ext_compat_id : 0, b ? b->struct_size : 0, b ? b->region_type : 0,
              b ? b->region_desc_element_size : 0);
        return;
    }
    const range_t *r = b->region_desc_elements;
    pthread_mutex_lock(&books);
    int hi = find_heap(b->heap);
    struct heap hp = hi >= 0 ? heaps[hi] : (struct heap){0};
    for (size_t i = 0; i < b->region_count; i++) {
        uintptr_t a = (uintptr_t)r[i].ptr, e = a + r[i].size;
        const char *bad = NULL;
        if (hi < 0) bad = "unknown heap";
        else if (!heap_alive(&hp)) bad = "its heap's memory was freed";
        else if (a < hp.base || e > hp.end) bad = "outside its heap";
        else
            for (int k = 0; k < nregions; k++)
                if (a < regions[k].end && regions[k].addr < e) bad = "overlaps a live region";
        if (bad) {
            pthread_mutex_unlock(&books);
            ERROR("nvtxMemRegionsRegister: heap %p addr=%p size=%zu: %s", pid, b->heap, r[i].ptr, r[i].size, bad);
            pthread_mutex_lock(&books);
            continue;
        }
        if (nregions < MAX_REGIONS) regions[nregions++] = (struct region){a, e, b->heap};
        pthread_mutex_unlock(&books);
        record("region_register %d %p addr=%p size=%zu", pid, b->heap, r[i].ptr, r[i].size);
        pthread_mutex_lock(&books);
    }
    pthread_mutex_unlock(&books);
}

static void my_regions_unregister(void *domain, const unregister_batch_t *b) {
    int pid = (int)getpid();
    if (!domain_ok(domain, "nvtxMemRegionsUnregister")) return;
    if (!b || b->ext_compat_id != COMPAT || b->struct_size != sizeof *b || b->ref_type != 1 ||
        b->ref_element_size != sizeof(void *)) {
        ERROR("nvtxMemRegionsUnregister: compat %#x, struct size %u, ref type %u, element size %zu", pid,
              b ? b->ext_compat_id : 0, b ? b->struct_size : 0, b ? b->ref_type : 0, b ? b->ref_element_size : 0);
        return;
    }
    for (size_t i = 0; i < b->ref_count; i++) {
        pthread_mutex_lock(&books);
        int k = find_region((uintptr_t)b->ref_elements[i]);
        if (k >= 0) regions[k] = regions[--nregions];
        pthread_mutex_unlock(&books);
        if (k < 0) ERROR("nvtxMemRegionsUnregister: %p is not a live region", pid, b->ref_elements[i]);
        else record("region_unregister %d addr=%p", pid, b->ref_elements[i]);
    }
}

/* A slot the recorder implements nothing at: any call there is the caller's mistake. */
static void my_wrong_slot(void) { ERROR("a memory-extension slot the recorder implements nothing at was called", (int)getpid()); }

int InitializeInjectionNvtxExtension(module_info_t *m) {
    record("mem %d module=%u compat=%u segments=%zu segment=%zu slots=%zu", (int)getpid(), m->module_id, m->compat_id,
           m->segments_count, m->segments_count ? m->segments[0].segment_id : 0,
           m->segments_count ? m->segments[0].slot_count : 0);
    if (fail_ext) return 0;
    if (m->nvtx_ver != 3 || m->struct_size != sizeof *m || m->module_id != 1 || m->compat_id != COMPAT ||
        m->segments_count != 1 || m->segments[0].segment_id != 1 || m->segments[0].slot_count != 63) {
        ERROR("InitializeInjectionNvtxExtension: version %u, struct size %u, module %u, compat %#x, %zu segments",
              (int)getpid(), m->nvtx_ver, m->struct_size, m->module_id, m->compat_id, m->segments_count);
        return 0;
    }
    /* NVTX 3.2's callback ids (from 1), or with NVTX_RECORDER_NUMBERING=0 those of the headers
     * CUDA 13.0 ships, which compute-sanitizer 13.0 uses (from 0: one less each). Every other
     * slot of the 17 gets a trap (slot 0 stays empty in the numbering from 1, which has no
     * callback 0), so a call made at the wrong place is an error line. */
    const char *numbering = getenv("NVTX_RECORDER_NUMBERING");
    int shift = numbering && !strcmp(numbering, "0") ? 1 : 0;
    intptr_t *slots = m->segments[0].function_slots;
    for (int i = 1 - shift; i <= 17 - shift; i++) slots[i] = (intptr_t)my_wrong_slot;
    slots[1 - shift] = (intptr_t)my_heap_register;
    slots[2 - shift] = (intptr_t)my_heap_unregister;
    slots[3 - shift] = (intptr_t)my_heap_reset;
    slots[4 - shift] = (intptr_t)my_regions_register;
    slots[6 - shift] = (intptr_t)my_regions_unregister;
    return 1;
}
