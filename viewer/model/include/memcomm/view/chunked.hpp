// Append-mostly arrays kept in fixed-size chunks: the storage of the model's per-event data
// (lane rows, collectives, allocator events, counter samples and their LOD levels).
//
// Note [Chunked arrays]: live mode appends to the model every 50 ms. With std::vector, the append
// that outgrows the capacity copies the whole array: at 4.2 M spans one publish copied 100 MB and
// stalled for 70-90 ms (bench_live_latency), a stall that grows with the run. A ChunkedArray keeps
// its elements in chunks of kChunk elements (a power of two, about 1 MiB): growing adds a chunk and
// never moves what is stored, so an append costs O(new elements) whatever the size. Element i is
// chunk i >> kShift, slot i & kMask: random access stays O(1), and lower_bound_index() below
// searches the chunks' last elements and then plain memory inside one chunk, so the per-frame
// queries cost what they did (memcomm-view --bench). Only the first chunk grows geometrically (so
// small arrays, like the deep rows of nested phases, stay small), and its growth copies at most
// one chunk. A whole array moves in O(1): the builder hands its ingest arrays to the model without
// a copy, and a bulk load needs no size estimate up front (growth copies nothing). A full-size
// chunk is mapped in one call when allocated, since it is about to be written, or comes already
// mapped from a second thread during a load (Notes [Prefaulting bulk arrays] and [Prefaulting on
// the second core] in prefault.cpp). Memory on top of the elements: 16 B per chunk, and the unused
// tail of the last chunk, which shrink_to_fit() trims (Note [Viewer memory budget] in timeline.hpp).
#pragma once

#include <memcomm/view/prefault.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace memcomm::view {

namespace detail {
// Largest s with (1 << s) elements of `elem` bytes fitting in `bytes`.
constexpr unsigned chunk_shift(std::size_t elem, std::size_t bytes) {
  unsigned s = 0;
  while ((std::size_t{2} << s) * elem <= bytes) ++s;
  return s;
}
}  // namespace detail

template <class T>
class ChunkedArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "chunks are copied with memcpy and freed without destructors");

 public:
  static constexpr unsigned kShift = detail::chunk_shift(sizeof(T), std::size_t{1} << 20);
  static constexpr std::size_t kChunk = std::size_t{1} << kShift;  // elements per full chunk
  static constexpr std::size_t kMask = kChunk - 1;
  static constexpr std::size_t kChunkBytes = kChunk * sizeof(T);  // a full chunk's allocation
  static constexpr std::size_t kFirst = 16;  // first capacity of chunk 0 (then doubling up to kChunk)
  static_assert(kChunk >= kFirst, "elements over 64 KiB: chunk 0 would start larger than a chunk");

  template <bool Const>
  class Iter {
    using Array = std::conditional_t<Const, const ChunkedArray, ChunkedArray>;

   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = std::conditional_t<Const, const T*, T*>;
    using reference = std::conditional_t<Const, const T&, T&>;

    Iter() = default;
    Iter(Array* a, std::size_t i) : a_(a), i_(i) {}
    template <bool C = Const, std::enable_if_t<C, int> = 0>
    Iter(const Iter<false>& o) : a_(o.a_), i_(o.i_) {}  // NOLINT(google-explicit-constructor): iterator -> const_iterator
    std::size_t index() const { return i_; }

    reference operator*() const { return (*a_)[i_]; }
    pointer operator->() const { return &(*a_)[i_]; }
    reference operator[](difference_type n) const { return (*a_)[i_ + static_cast<std::size_t>(n)]; }
    Iter& operator++() { ++i_; return *this; }
    Iter& operator--() { --i_; return *this; }
    Iter operator++(int) { Iter t = *this; ++i_; return t; }
    Iter operator--(int) { Iter t = *this; --i_; return t; }
    Iter& operator+=(difference_type n) { i_ += static_cast<std::size_t>(n); return *this; }
    Iter& operator-=(difference_type n) { i_ -= static_cast<std::size_t>(n); return *this; }
    friend Iter operator+(Iter it, difference_type n) { return it += n; }
    friend Iter operator+(difference_type n, Iter it) { return it += n; }
    friend Iter operator-(Iter it, difference_type n) { return it -= n; }
    friend difference_type operator-(const Iter& a, const Iter& b) {
      return static_cast<difference_type>(a.i_) - static_cast<difference_type>(b.i_);
    }
    friend bool operator==(const Iter& a, const Iter& b) { return a.i_ == b.i_; }
    friend bool operator!=(const Iter& a, const Iter& b) { return a.i_ != b.i_; }
    friend bool operator<(const Iter& a, const Iter& b) { return a.i_ < b.i_; }
    friend bool operator>(const Iter& a, const Iter& b) { return a.i_ > b.i_; }
    friend bool operator<=(const Iter& a, const Iter& b) { return a.i_ <= b.i_; }
    friend bool operator>=(const Iter& a, const Iter& b) { return a.i_ >= b.i_; }

   private:
    template <bool>
    friend class Iter;
    Array* a_ = nullptr;
    std::size_t i_ = 0;
  };

  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  ChunkedArray() = default;
  ChunkedArray(std::initializer_list<T> init) { append(init.begin(), init.size()); }
  ChunkedArray(const ChunkedArray& o) {
    reserve(o.size());
    o.for_each_chunk([this](const T* p, std::size_t n) { append(p, n); });
  }
  ChunkedArray(ChunkedArray&& o) noexcept
      : chunks_(std::move(o.chunks_)), size_(o.size_), end_(o.end_), limit_(o.limit_) {
    o.forget();
  }
  ChunkedArray& operator=(const ChunkedArray& o) {
    if (this != &o) {
      ChunkedArray copy(o);
      swap(copy);
    }
    return *this;
  }
  ChunkedArray& operator=(ChunkedArray&& o) noexcept {
    if (this != &o) {
      release();
      chunks_ = std::move(o.chunks_);
      size_ = o.size_;
      end_ = o.end_;
      limit_ = o.limit_;
      o.forget();
    }
    return *this;
  }
  ~ChunkedArray() { release(); }
  void swap(ChunkedArray& o) noexcept {
    chunks_.swap(o.chunks_);
    std::swap(size_, o.size_);
    std::swap(end_, o.end_);
    std::swap(limit_, o.limit_);
  }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Elements that fit before the next allocation (every chunk but the last is full-size).
  std::size_t capacity() const { return chunks_.empty() ? 0 : (chunks_.size() - 1) * kChunk + chunks_.back().cap; }
  // Bytes held (elements' capacity and the chunk table), for the memory budget.
  std::size_t memory_bytes() const { return capacity() * sizeof(T) + chunks_.capacity() * sizeof(Chunk); }

  T& operator[](std::size_t i) { return chunks_[i >> kShift].data[i & kMask]; }
  const T& operator[](std::size_t i) const { return chunks_[i >> kShift].data[i & kMask]; }
  T& at(std::size_t i) { return i < size_ ? (*this)[i] : throw std::out_of_range("ChunkedArray::at"); }
  const T& at(std::size_t i) const { return i < size_ ? (*this)[i] : throw std::out_of_range("ChunkedArray::at"); }
  T& front() { return chunks_.front().data[0]; }
  const T& front() const { return chunks_.front().data[0]; }
  T& back() { return end_[-1]; }  // end_ stays in the chunk of the last element
  const T& back() const { return end_[-1]; }

  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size_}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

  void push_back(const T& v) {
    if (end_ == limit_) {
      const T copy = v;  // `v` may live in the chunk that grow() moves
      grow();
      ::new (static_cast<void*>(end_)) T(copy);
    } else {
      ::new (static_cast<void*>(end_)) T(v);
    }
    ++end_;
    ++size_;
  }
  // Appends n elements (not from this array) a chunk at a time.
  void append(const T* p, std::size_t n) {
    while (n > 0) {
      if (end_ == limit_) grow();
      const std::size_t k = std::min(n, static_cast<std::size_t>(limit_ - end_));
      std::memcpy(static_cast<void*>(end_), p, k * sizeof(T));
      end_ += k;
      size_ += k;
      p += k;
      n -= k;
    }
  }
  void append(const ChunkedArray& o) {  // another array's elements
    if (&o != this) o.for_each_chunk([this](const T* p, std::size_t n) { append(p, n); });
    else append(ChunkedArray(o));
  }
  template <class It>
  void append(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }

  // Room for n elements in all (like vector::reserve).
  void reserve(std::size_t n) {
    if (n <= capacity()) return;
    const std::size_t need = (n + kMask) >> kShift;
    for (std::size_t k = 0; k < need; ++k) {
      const std::size_t want = k + 1 < need ? kChunk : n - k * kChunk;
      if (k < chunks_.size()) {
        if (chunks_[k].cap < want) resize_chunk(k, want);
      } else {
        chunks_.reserve(chunks_.size() + 1);  // no throw between allocating the chunk and filing it
        chunks_.push_back({allocate(want), want});
      }
    }
    point_at_end();
  }
  // Drops the elements from index n on (n <= size()); keeps the capacity.
  void truncate(std::size_t n) {
    size_ = std::min(n, size_);
    point_at_end();
  }
  void clear() { truncate(0); }
  // Frees the chunks past the last element and trims the last one when over 1/8 of it is unused
  // (a copy of at most one chunk).
  void shrink_to_fit() {
    const std::size_t used = (size_ + kMask) >> kShift;
    for (std::size_t k = used; k < chunks_.size(); ++k) deallocate(chunks_[k].data);
    chunks_.resize(used);
    if (used > 0) {
      const std::size_t n = size_ - (used - 1) * kChunk;
      if (chunks_.back().cap - n > chunks_.back().cap / 8) resize_chunk(used - 1, n);
    }
    chunks_.shrink_to_fit();
    point_at_end();
  }

  // Contiguous pieces, for bulk loops: chunk k holds elements [k * kChunk, k * kChunk + chunk_size(k)).
  std::size_t chunk_count() const { return (size_ + kMask) >> kShift; }
  const T* chunk_data(std::size_t k) const { return chunks_[k].data; }
  T* chunk_data(std::size_t k) { return chunks_[k].data; }
  std::size_t chunk_size(std::size_t k) const { return std::min(kChunk, size_ - k * kChunk); }
  // f(pointer, count) for each contiguous piece, in order.
  template <class F>
  void for_each_chunk(F&& f) const {
    for (std::size_t k = 0, n = chunk_count(); k < n; ++k) f(static_cast<const T*>(chunks_[k].data), chunk_size(k));
  }
  template <class F>
  void for_each_chunk(F&& f) {
    for (std::size_t k = 0, n = chunk_count(); k < n; ++k) f(chunks_[k].data, chunk_size(k));
  }

 private:
  struct Chunk {
    T* data;          // kChunk elements, except the last chunk's (cap)
    std::size_t cap;  // elements allocated
  };
  static T* allocate(std::size_t n) {
    if (n == kChunk) return static_cast<T*>(new_prefaulted(kChunkBytes));  // a full chunk is about to be written
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  static void deallocate(T* p) { ::operator delete(static_cast<void*>(p)); }
  void release() {
    for (const Chunk& c : chunks_) deallocate(c.data);
    chunks_.clear();
    forget();
  }
  void forget() {  // after the chunks were moved away or freed
    chunks_.clear();
    size_ = 0;
    end_ = limit_ = nullptr;
  }
  // Moves chunk k to an allocation of `cap` elements, keeping its elements.
  void resize_chunk(std::size_t k, std::size_t cap) {
    Chunk& c = chunks_[k];
    const std::size_t held = size_ > k * kChunk ? std::min(kChunk, size_ - k * kChunk) : 0;
    T* p = allocate(cap);
    if (held > 0) std::memcpy(static_cast<void*>(p), c.data, held * sizeof(T));
    deallocate(c.data);
    c = {p, cap};
  }
  // end_/limit_ to the chunk that holds the last element (chunk 0 when empty).
  void point_at_end() {
    if (chunks_.empty()) {
      end_ = limit_ = nullptr;
      return;
    }
    const std::size_t k = size_ == 0 ? 0 : (size_ - 1) >> kShift;
    end_ = chunks_[k].data + (size_ - k * kChunk);
    limit_ = chunks_[k].data + chunks_[k].cap;
  }
  // The chunk of end_ is full: continue in the next one (allocated when missing), or grow chunk 0.
  void grow() {
    const std::size_t k = size_ >> kShift, at = size_ & kMask;
    if (k < chunks_.size()) {
      if (at >= chunks_[k].cap) resize_chunk(k, std::min(kChunk, std::max(kFirst, chunks_[k].cap * 2)));
    } else {
      const std::size_t cap = k == 0 ? kFirst : kChunk;
      chunks_.reserve(chunks_.size() + 1);  // no throw between allocating the chunk and filing it
      chunks_.push_back({allocate(cap), cap});
    }
    end_ = chunks_[k].data + at;
    limit_ = chunks_[k].data + chunks_[k].cap;
  }

  std::vector<Chunk> chunks_;  // all but the last have cap == kChunk
  std::size_t size_ = 0;
  T* end_ = nullptr;    // one past the last element (in the chunk holding it)
  T* limit_ = nullptr;  // end of that chunk's allocation
};

// Index of the first element in [first, last) for which less(element, value) is false, as
// std::lower_bound, found chunk by chunk: a binary search over the chunks' last elements, then
// one over plain memory inside one chunk (the per-frame queries run many of these).
template <class T, class V, class Less>
std::size_t lower_bound_index(const ChunkedArray<T>& a, std::size_t first, std::size_t last, const V& value, Less less) {
  using A = ChunkedArray<T>;
  if (first >= last) return first;
  std::size_t kl = first >> A::kShift, kh = (last - 1) >> A::kShift;
  while (kl < kh) {  // the first chunk whose last element is not less than value (else the last chunk)
    const std::size_t mid = kl + (kh - kl) / 2;
    if (less(a[((mid + 1) << A::kShift) - 1], value)) kl = mid + 1;
    else kh = mid;
  }
  const std::size_t base = kl << A::kShift;
  const T* p = a.chunk_data(kl);
  const std::size_t lo = std::max(first, base) - base, hi = std::min(last, base + A::kChunk) - base;
  return base + static_cast<std::size_t>(std::lower_bound(p + lo, p + hi, value, less) - p);
}
template <class T, class V, class Less>
std::size_t lower_bound_index(const ChunkedArray<T>& a, const V& value, Less less) {
  return lower_bound_index(a, 0, a.size(), value, less);
}

}  // namespace memcomm::view
