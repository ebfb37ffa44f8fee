// rmm_stand_in.cc: a stand-in for RMM's pool (pool_memory_resource, RMM 26.10) on the simulated
// driver, for the card cuguard makes when RMM refuses: RMM's exception types as its headers
// declare them (rmm::bad_alloc, rmm::out_of_memory, with their what()), its pool's growth
// (size_to_grow, try_to_expand halving its tries and catching the upstream's refusals) and its
// messages, word for word; a best-fit free list, split blocks not coalesced (enough here).
//
//   rmm_stand_in limit    a pool of 64 MiB growing to at most 256 MiB: twelve 16 MiB buffers
//                         (the pool grows to 208 MiB), every other one freed, then 160 MiB
//                         asked: past the maximum.
//   rmm_stand_in device   a pool with no maximum on a device of 1 GiB: 512 MiB taken, then
//                         768 MiB asked: the device refuses the pool's growth.
//   rmm_stand_in arena    an arena of 128 MiB (arena_memory_resource): 96 MiB taken, then
//                         64 MiB asked: "No room in arena".
//   rmm_stand_in limiting a limiting adaptor of 128 MiB over the device (limiting_resource_adaptor):
//                         96 MiB taken, then 64 MiB asked: "Exceeded memory limit".
// Each refusal is caught as Python's MemoryError would be, and said on stdout.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "cusim.h"

namespace rmm {
class bad_alloc : public std::bad_alloc {
   public:
    explicit bad_alloc(std::string const& msg)
        : what_{std::string{std::bad_alloc::what()} + ": " + msg} {}
    const char* what() const noexcept override { return what_.c_str(); }

   private:
    std::string what_;
};

class out_of_memory : public bad_alloc {
   public:
    explicit out_of_memory(std::string const& msg) : bad_alloc{"out_of_memory: " + msg} {}
};

namespace detail {
std::string format_bytes(std::size_t value) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
    std::size_t index = 0;
    auto size = static_cast<double>(value);
    while (size > 1024) {
        size /= 1024;
        index++;
    }
    return std::to_string(size) + ' ' + units[index];
}
}  // namespace detail

#define RMM_FAIL(msg, type) throw type(std::string("RMM failure at:" __FILE__ ":") + std::to_string(__LINE__) + ": " + (msg))

class pool_memory_resource {
   public:
    pool_memory_resource(std::size_t initial, std::optional<std::size_t> maximum) : maximum_{maximum} {
        if (initial > 0) insert(try_to_expand(initial, initial));
    }

    void* allocate(std::size_t bytes) {
        std::size_t size = (bytes + 255) / 256 * 256;
        auto best = free_.end();
        for (auto it = free_.begin(); it != free_.end(); ++it)
            if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
        std::pair<char*, std::size_t> block;
        if (best != free_.end()) {
            block = *best;
            free_.erase(best);
        } else {
            block = try_to_expand(size_to_grow(size), size);
        }
        if (block.second > size) free_[block.first + size] = block.second - size;
        return block.first;
    }

    void deallocate(void* p, std::size_t bytes) { free_[static_cast<char*>(p)] = (bytes + 255) / 256 * 256; }

    std::size_t pool_size() const { return current_; }

    ~pool_memory_resource() {
        for (auto& u : upstream_) cuMemFree((CUdeviceptr)u);
    }

   private:
    void insert(std::pair<char*, std::size_t> b) { free_[b.first] = b.second; }

    std::pair<char*, std::size_t> block_from_upstream(std::size_t size) {
        CUdeviceptr p = 0;
        if (cuMemAlloc(&p, size) != CUDA_SUCCESS)
            throw out_of_memory(std::string("CUDA error (failed to allocate ") + std::to_string(size) +
                                " bytes) at: rmm_stand_in.cc: cudaErrorMemoryAllocation out of memory");
        upstream_.push_back((char*)p);
        return {(char*)p, size};
    }

    std::pair<char*, std::size_t> try_to_expand(std::size_t try_size, std::size_t min_size) {
        auto report_error = [&](const char* reason) {
            auto const msg = std::string("Maximum pool size exceeded (failed to allocate ") +
                             detail::format_bytes(min_size) + std::string("): ") + reason;
            RMM_FAIL(msg, rmm::out_of_memory);
        };
        while (try_size >= min_size) {
            try {
                auto block = block_from_upstream(try_size);
                current_ += block.second;
                return block;
            } catch (std::exception const& e) {
                if (try_size == min_size) report_error(e.what());
            }
            try_size = std::max(min_size, try_size / 2);
        }
        auto const max_size = maximum_.value_or(SIZE_MAX);
        auto const msg = std::string("Not enough room to grow, current/max/try size = ") +
                         detail::format_bytes(current_) + ", " + detail::format_bytes(max_size) + ", " +
                         detail::format_bytes(min_size);
        report_error(msg.c_str());
        return {};
    }

    std::size_t size_to_grow(std::size_t size) const {
        if (maximum_) {
            auto const remaining = (*maximum_ - current_ + 255) / 256 * 256;
            return size <= remaining ? std::max(size, remaining / 2) : 0;
        }
        return std::max(size, current_);
    }

    std::optional<std::size_t> maximum_;
    std::size_t current_ = 0;
    std::map<char*, std::size_t> free_;
    std::vector<char*> upstream_;
};
// The arena's refusal, as arena_memory_resource_impl.cpp words it: one block of arena_size
// from the device, handed out in order.
class arena_memory_resource {
   public:
    explicit arena_memory_resource(std::size_t arena_size) : size_{arena_size} {
        if (cuMemAlloc(&base_, size_) != CUDA_SUCCESS) throw bad_alloc("arena");
    }
    void* allocate(std::size_t bytes) {
        bytes = (bytes + 255) / 256 * 256;
        if (used_ + bytes > size_) {
            auto const msg = std::string("Maximum pool size exceeded (failed to allocate ") +
                             detail::format_bytes(bytes) + "): No room in arena.";
            RMM_FAIL(msg, rmm::out_of_memory);
        }
        used_ += bytes;
        return (void*)(base_ + used_ - bytes);
    }
    ~arena_memory_resource() { cuMemFree(base_); }

   private:
    CUdeviceptr base_ = 0;
    std::size_t size_, used_ = 0;
};

// The limiting adaptor's refusal, as limiting_resource_adaptor_impl.cpp words it, over the
// device.
class limiting_resource_adaptor {
   public:
    explicit limiting_resource_adaptor(std::size_t limit) : limit_{limit} {}
    void* allocate(std::size_t bytes) {
        auto const proposed = (bytes + 255) / 256 * 256;
        if (allocated_ + proposed > limit_) {
            auto const msg = std::string("Exceeded memory limit (failed to allocate ") +
                             detail::format_bytes(bytes) + ")";
            RMM_FAIL(msg, rmm::out_of_memory);
        }
        CUdeviceptr p = 0;
        if (cuMemAlloc(&p, bytes) != CUDA_SUCCESS) throw out_of_memory("CUDA error");
        allocated_ += proposed;
        return (void*)p;
    }
    void deallocate(void* p, std::size_t bytes) {
        cuMemFree((CUdeviceptr)p);
        allocated_ -= (bytes + 255) / 256 * 256;
    }

   private:
    std::size_t limit_, allocated_ = 0;
};
}  // namespace rmm

static const std::size_t MiB = std::size_t{1} << 20;

static void ask(rmm::pool_memory_resource& pool, std::size_t bytes) {
    try {
        void* p = pool.allocate(bytes);  // asks
        std::printf("served %zu\n", bytes);
        pool.deallocate(p, bytes);
    } catch (std::bad_alloc const& e) {
        std::printf("refused: %s\n", e.what());
    }
}

// Asks `resource` (the arena or the limiting adaptor) for `bytes`; kept when served.
template <typename Resource>
static void ask_other(Resource& resource, std::size_t bytes) {
    try {
        resource.allocate(bytes);  // other asks
        std::printf("served %zu\n", bytes);
    } catch (std::bad_alloc const& e) {
        std::printf("refused: %s\n", e.what());
    }
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 3;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (!std::strcmp(argv[1], "limit")) {
        rmm::pool_memory_resource pool(64 * MiB, 256 * MiB);
        std::vector<void*> bufs;
        for (int i = 0; i < 12; i++) bufs.push_back(pool.allocate(16 * MiB));  // buffers
        for (int i = 0; i < 12; i += 2) pool.deallocate(bufs[i], 16 * MiB);
        std::printf("pool %zu\n", pool.pool_size());
        ask(pool, 160 * MiB);
        for (int i = 1; i < 12; i += 2) pool.deallocate(bufs[i], 16 * MiB);
    } else if (!std::strcmp(argv[1], "arena")) {
        rmm::arena_memory_resource arena(128 * MiB);
        ask_other(arena, 96 * MiB);
        ask_other(arena, 64 * MiB);
    } else if (!std::strcmp(argv[1], "limiting")) {
        rmm::limiting_resource_adaptor limiting(128 * MiB);
        void* kept = limiting.allocate(96 * MiB);  // limited
        ask_other(limiting, 64 * MiB);
        limiting.deallocate(kept, 96 * MiB);
    } else {
        rmm::pool_memory_resource pool(64 * MiB, std::nullopt);
        void* big = pool.allocate(448 * MiB);  // kept
        std::printf("pool %zu\n", pool.pool_size());
        ask(pool, 768 * MiB);
        pool.deallocate(big, 448 * MiB);
    }
    return 0;
}
