// A free list of fixed-size nodes for std::set, so the locked fast path never calls malloc.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace memcomm::alloc {

// Hands out blocks of one size (the first size asked for), carved from 64 KiB slabs and recycled.
// Not thread-safe: the allocator's mutex guards it.
class NodePool {
 public:
  NodePool() = default;
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool() {
    for (void* slab : slabs_) ::operator delete(slab);
  }
  void* get(std::size_t bytes) {
    if (node_size_ == 0) node_size_ = bytes < sizeof(Free) ? sizeof(Free) : bytes;
    if (bytes > node_size_) return ::operator new(bytes);  // not a set node; never happens with std::set
    if (!head_) refill();
    Free* f = head_;
    head_ = f->next;
    return f;
  }
  void put(void* p, std::size_t bytes) {
    if (bytes > node_size_) {
      ::operator delete(p);
      return;
    }
    Free* f = static_cast<Free*>(p);
    f->next = head_;
    head_ = f;
  }

 private:
  struct Free {
    Free* next;  // next free node
  };
  void refill() {
    constexpr std::size_t kSlab = 64 * 1024;
    std::size_t stride = (node_size_ + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) * alignof(std::max_align_t);
    char* slab = static_cast<char*>(::operator new(kSlab));
    slabs_.push_back(slab);
    for (std::size_t off = 0; off + stride <= kSlab; off += stride) put(slab + off, node_size_);
  }
  std::size_t node_size_ = 0;   // size of every node (set on first use)
  Free* head_ = nullptr;        // free nodes
  std::vector<void*> slabs_;    // everything ever carved, freed with the pool
};

// std::allocator-compatible front end of a NodePool (all rebinds share the pool).
template <class T>
class NodePoolAllocator {
 public:
  using value_type = T;
  explicit NodePoolAllocator(NodePool* pool) : pool_(pool) {}
  template <class U>
  NodePoolAllocator(const NodePoolAllocator<U>& other) : pool_(other.pool()) {}
  T* allocate(std::size_t n) { return static_cast<T*>(pool_->get(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { pool_->put(p, n * sizeof(T)); }
  NodePool* pool() const { return pool_; }
  template <class U>
  bool operator==(const NodePoolAllocator<U>& o) const { return pool_ == o.pool(); }
  template <class U>
  bool operator!=(const NodePoolAllocator<U>& o) const { return pool_ != o.pool(); }

 private:
  NodePool* pool_;  // not owned
};

}  // namespace memcomm::alloc
