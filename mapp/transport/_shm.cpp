// mapp.transport._shm: tagged asynchronous messages between processes of one host over
// POSIX shared memory. No torch and no CUDA here: the Python side hands in raw CPU
// pointers and gets back byte buffers (the CUDA IPC path rides on these messages).
//
// One segment per directed pair (src -> dst), created by src, mapped by both, then unlinked
// at once. It holds a control ring of chunk descriptors and a circular data arena. Per peer,
// a sender thread streams queued messages through the arena in chunks (round robin over the
// messages in flight, so a small message is not stuck behind a large one), and a receiver
// thread copies chunks out in order, assembles messages and matches them to posted receives
// by (channel, tag), staging those nobody asked for yet. Threads sleep on futexes in the
// segment; each side holds a robust process-shared mutex for its lifetime, so a peer that
// dies (even by SIGKILL) is seen as EOWNERDEAD on the next timed wake-up.
//
// Large messages skip the arena where the kernel lets the receiver read the sender's memory
// (process_vm_readv, "cross-memory attach"): the sender publishes descriptors that point
// into its own address space, and the receiver copies straight from there into the message's
// buffer, split over a few threads. One copy instead of two, spread over cores; the send
// completes once the receiver has consumed its last descriptor. Whether a pair may do this
// is tried once at set-up (a read of the segment's magic word from the sender), so a host
// that forbids it (Yama ptrace_scope >= 1, another PID namespace) falls back to the arena.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

constexpr uint32_t kMagic = 0x5050414d;  // "MAPP"
constexpr uint32_t kVersion = 3;
constexpr int kMetaWords = 20;  // a message header (16) and the CUDA IPC placement (4)
constexpr int kLivenessMs = 100;  // how often a sleeping thread checks that its peer lives

// descriptor flags (bits 0-7 ours; higher bits belong to the caller and travel untouched)
constexpr uint32_t kFirst = 1, kLast = 2, kClose = 4;
constexpr uint32_t kRemote = 8;  // arena_pos is an address in the sender's memory, not in the arena
constexpr uint32_t kNotify = 1u << 8;  // also announce the message through pop_arrival()

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory counters need lock-free 64-bit atomics");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words need lock-free 32-bit atomics");

// A futex word with a count of its sleepers: bumping it costs a system call only when
// someone sleeps on it (a chunk's publish and consume would otherwise make two each).
// Both sides use sequentially consistent order, so a sleeper either sees the new value or
// is counted before the bump looks; the liveness timeout bounds any wait anyway.
struct Futex {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> waiters;
  uint32_t load(std::memory_order order) const { return seq.load(order); }
};

struct Desc {
  uint64_t msg_id;
  int64_t tag;
  uint64_t total;      // bytes of the whole message
  uint64_t offset;     // of this chunk within the message
  uint64_t arena_pos;  // position of this chunk in the arena's byte stream (mod arena size),
                       // or with kRemote its address in the sender's memory
  uint64_t len;
  uint32_t flags;
  uint32_t channel;
  int64_t meta[kMetaWords];
};

struct alignas(64) SegmentHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t ring_slots;
  uint64_t arena_bytes;
  uint64_t ring_offset;
  uint64_t arena_offset;
  int32_t sender_pid;
  int32_t receiver_pid;
  uint64_t sender_base;             // where the sender mapped this segment (its address space)
  std::atomic<uint32_t> single_copy;  // set by the receiver: it can read the sender's memory
  pthread_mutex_t sender_life;    // held by the sender's thread while it runs
  pthread_mutex_t receiver_life;  // held by the receiver's thread while it runs
  std::atomic<uint32_t> sender_up;    // set once sender_life is held: an unheld lock
  std::atomic<uint32_t> receiver_up;  // before that means "starting", not "closed"
  alignas(64) std::atomic<uint64_t> head;  // descriptors published (sender)
  Futex head_seq;                          // bumped on publish
  alignas(64) std::atomic<uint64_t> tail;  // descriptors consumed (receiver)
  std::atomic<uint64_t> arena_freed;       // arena stream bytes the receiver is done with
  Futex tail_seq;                          // bumped on consume
  // the CUDA IPC device arena of this pair: bytes the receiver has copied out (Python's)
  alignas(64) std::atomic<uint64_t> device_freed;
  Futex device_seq;
};

uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

int futex_wait(Futex* f, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  f->waiters.fetch_add(1, std::memory_order_seq_cst);
  int r = 0;
  if (f->seq.load(std::memory_order_seq_cst) == expected)
    r = static_cast<int>(syscall(SYS_futex, reinterpret_cast<uint32_t*>(&f->seq), FUTEX_WAIT, expected, &ts, nullptr, 0));
  f->waiters.fetch_sub(1, std::memory_order_seq_cst);
  return r;
}

void bump(Futex* f) {
  f->seq.fetch_add(1, std::memory_order_seq_cst);
  if (f->waiters.load(std::memory_order_seq_cst) != 0)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&f->seq), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

enum class Life { kAlive, kClosed, kDead };

// Whether the thread holding `m` (in another process) still runs: EBUSY while it holds the
// lock, EOWNERDEAD once it died holding it, 0 when it let go (a clean close).
Life probe(pthread_mutex_t* m, const std::atomic<uint32_t>& up) {
  if (up.load(std::memory_order_acquire) == 0) return Life::kAlive;
  int r = pthread_mutex_trylock(m);
  if (r == EBUSY) return Life::kAlive;
  if (r == EOWNERDEAD) {
    pthread_mutex_consistent(m);
    pthread_mutex_unlock(m);
    return Life::kDead;
  }
  if (r == 0) {
    pthread_mutex_unlock(m);
    return Life::kClosed;
  }
  return Life::kDead;  // ENOTRECOVERABLE: a death seen before
}

void init_robust_mutex(pthread_mutex_t* m) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &attr);
  pthread_mutexattr_destroy(&attr);
}

// Take a life mutex for this thread; a previous holder that died leaves it EOWNERDEAD.
void hold(pthread_mutex_t* m) {
  if (pthread_mutex_lock(m) == EOWNERDEAD) pthread_mutex_consistent(m);
}

class Segment {
 public:
  static std::unique_ptr<Segment> create(const std::string& name, uint64_t slots, uint64_t arena_bytes) {
    uint64_t ring_offset = round_up(sizeof(SegmentHeader), 4096);
    uint64_t arena_offset = round_up(ring_offset + slots * sizeof(Desc), 4096);
    uint64_t size = arena_offset + arena_bytes;
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {  // left by an earlier run of this job that crashed
      shm_unlink(name.c_str());
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    }
    if (fd < 0) throw std::runtime_error(errno_text("cannot create shared memory segment " + name));
    // fallocate, not only ftruncate: a /dev/shm too small must fail here, not as SIGBUS later
    int rc = ftruncate(fd, static_cast<off_t>(size)) == 0 ? posix_fallocate(fd, 0, static_cast<off_t>(size)) : errno;
    if (rc != 0) {
      close(fd);
      shm_unlink(name.c_str());
      errno = rc;
      throw std::runtime_error(errno_text("cannot reserve " + std::to_string(size >> 20) + " MiB in /dev/shm for " + name));
    }
    auto seg = map(name, fd, size);
    auto* h = new (seg->base_) SegmentHeader();
    h->ring_slots = slots;
    h->arena_bytes = arena_bytes;
    h->ring_offset = ring_offset;
    h->arena_offset = arena_offset;
    h->sender_pid = getpid();
    h->sender_base = reinterpret_cast<uint64_t>(seg->base_);
    init_robust_mutex(&h->sender_life);
    init_robust_mutex(&h->receiver_life);
    std::atomic_thread_fence(std::memory_order_release);
    h->version = kVersion;
    h->magic = kMagic;
    return seg;
  }

  static std::unique_ptr<Segment> open(const std::string& name) {
    int fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) throw std::runtime_error(errno_text("cannot open shared memory segment " + name));
    struct stat st;
    if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < sizeof(SegmentHeader)) {
      close(fd);
      throw std::runtime_error("shared memory segment " + name + " is too small");
    }
    auto seg = map(name, fd, static_cast<uint64_t>(st.st_size));
    auto* h = seg->header();
    if (h->magic != kMagic || h->version != kVersion)
      throw std::runtime_error("shared memory segment " + name + " is not a mapp transport segment of this version");
    h->receiver_pid = getpid();
    return seg;
  }

  ~Segment() {
    if (base_ != nullptr) munmap(base_, size_);
  }

  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base_); }
  Desc* ring() const { return reinterpret_cast<Desc*>(static_cast<char*>(base_) + header()->ring_offset); }
  char* arena() const { return static_cast<char*>(base_) + header()->arena_offset; }
  const std::string& name() const { return name_; }

 private:
  static std::unique_ptr<Segment> map(const std::string& name, int fd, uint64_t size) {
    void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) throw std::runtime_error(errno_text("cannot map shared memory segment " + name));
    auto seg = std::unique_ptr<Segment>(new Segment());
    seg->name_ = name;
    seg->base_ = base;
    seg->size_ = size;
    return seg;
  }
  Segment() = default;
  std::string name_;
  void* base_ = nullptr;
  uint64_t size_ = 0;
};

// Where received messages' bytes live. Fresh memory costs a page fault and the zeroing of
// every page on first touch (as much as the copy itself); a pipeline receives the same sizes
// step after step, so large buffers come from mmap (transparent huge pages where allowed)
// and go back to a small cache when Python drops them, for the next message of that size.
class Pool {
 public:
  static constexpr uint64_t kMin = 1 << 20;   // smaller buffers come from malloc
  static constexpr uint64_t kGrain = 1 << 16;

  explicit Pool(uint64_t cap) : cap_(cap) {}
  ~Pool() {
    for (auto& [size, p] : free_) munmap(p, size);
  }

  // The mapped size and the memory, or (0, nullptr) when malloc should serve it.
  std::pair<uint64_t, char*> take(uint64_t n) {
    if (n < kMin) return {0, nullptr};
    uint64_t size = round_up(n, kGrain);
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = free_.lower_bound(size);
      if (it != free_.end() && it->first <= size + size / 4) {
        auto got = *it;
        free_.erase(it);
        cached_ -= got.first;
        return {got.first, got.second};
      }
    }
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    madvise(p, size, MADV_HUGEPAGE);  // advisory: fewer faults and TLB misses
    return {size, static_cast<char*>(p)};
  }

  void give(uint64_t size, char* p) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (size <= cap_) {
        // over the cap, the smallest cached buffers go first
        while (cached_ + size > cap_ && !free_.empty()) {
          auto it = free_.begin();
          munmap(it->second, it->first);
          cached_ -= it->first;
          free_.erase(it);
        }
        free_.emplace(size, p);
        cached_ += size;
        return;
      }
    }
    munmap(p, size);
  }

 private:
  std::mutex mu_;
  std::multimap<uint64_t, char*> free_;
  uint64_t cached_ = 0;
  uint64_t cap_;
};

// A received message's bytes, handed to Python through the buffer protocol (torch.frombuffer
// keeps this object alive as long as the tensor).
class Buffer {
 public:
  Buffer(uint64_t n, std::shared_ptr<Pool> pool) : size_(n), pool_(std::move(pool)) {
    std::tie(mapped_, data_) = pool_->take(n);
    if (data_ == nullptr && n) {
      data_ = static_cast<char*>(std::aligned_alloc(64, round_up(n, 64)));
      if (data_ == nullptr) throw std::bad_alloc();
    }
  }
  ~Buffer() {
    if (mapped_) pool_->give(mapped_, data_);
    else std::free(data_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  uint64_t size_;
  uint64_t mapped_ = 0;
  std::shared_ptr<Pool> pool_;
};

// Reads another process's memory (process_vm_readv) into ours, one message chunk at a time,
// split into slices that a few helper threads copy side by side: one thread's copy runs at a
// fraction of what the memory system gives several. Helpers sleep when no read is under way.
class Reader {
 public:
  static constexpr uint64_t kMinSlice = 256 << 10;

  explicit Reader(int threads) {
    for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { serve(); });
  }
  ~Reader() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : helpers_) t.join();
  }

  // Copy n bytes at `remote` in process `pid` to `local`: 0, or the errno that stopped it.
  int read(pid_t pid, char* local, uint64_t remote, uint64_t n) {
    uint64_t parts = std::min<uint64_t>(helpers_.size() + 1, std::max<uint64_t>(1, n / kMinSlice));
    uint64_t slice = round_up((n + parts - 1) / parts, 4096);
    Latch latch;
    uint64_t offset = slice;
    {
      std::lock_guard<std::mutex> g(mu_);
      for (; offset < n; offset += slice) {
        jobs_.push_back({pid, local + offset, remote + offset, std::min(slice, n - offset), &latch});
        ++latch.left;
      }
    }
    cv_.notify_all();
    int err = copy(pid, local, remote, std::min(slice, n));
    std::unique_lock<std::mutex> g(mu_);
    latch.done.wait(g, [&] { return latch.left == 0; });
    return err ? err : latch.err;
  }

  // Whether this process may read `pid`'s memory: the 4 bytes at `remote` equal `expect`.
  static bool can_read(pid_t pid, uint64_t remote, uint32_t expect) {
    uint32_t word = 0;
    return copy(pid, reinterpret_cast<char*>(&word), remote, sizeof(word)) == 0 && word == expect;
  }

 private:
  struct Latch {
    int left = 0;
    int err = 0;
    std::condition_variable done;
  };
  struct Job {
    pid_t pid;
    char* local;
    uint64_t remote;
    uint64_t n;
    Latch* latch;
  };

  static int copy(pid_t pid, char* local, uint64_t remote, uint64_t n) {
    while (n > 0) {
      iovec to{local, n};
      iovec from{reinterpret_cast<void*>(remote), n};
      ssize_t got = process_vm_readv(pid, &to, 1, &from, 1, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return got < 0 ? errno : EFAULT;
      local += got;
      remote += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
    return 0;
  }

  void serve() {
    std::unique_lock<std::mutex> g(mu_);
    while (true) {
      cv_.wait(g, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping
      Job job = jobs_.front();
      jobs_.pop_front();
      g.unlock();
      int err = copy(job.pid, job.local, job.remote, job.n);
      g.lock();
      if (err && !job.latch->err) job.latch->err = err;
      if (--job.latch->left == 0) job.latch->done.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::vector<std::thread> helpers_;
};

struct Signal {
  std::mutex mu;
  std::condition_variable cv;
};

enum class State { kPending, kDone, kFailed };

// One posted isend or irecv.
struct Op {
  std::shared_ptr<Signal> signal;
  State state = State::kPending;
  std::string error;
  int peer = -1;
  int64_t tag = 0;
  uint32_t channel = 0;
  uint32_t flags = 0;
  std::vector<int64_t> meta;
  uint64_t msg_id = 0;
  // send side
  const char* src = nullptr;
  uint64_t nbytes = 0;
  uint64_t sent = 0;
  bool remote = false;      // the receiver reads it from our memory (single copy)
  uint64_t last_desc = 0;   // ...and it may be reused once this descriptor is consumed
  // receive side
  std::shared_ptr<Buffer> buffer;

  // callers hold signal->mu
  void finish(State s, std::string why = {}) {
    if (state != State::kPending) return;
    state = s;
    error = std::move(why);
    signal->cv.notify_all();
  }
};

// A message being received. It takes its place in the matching order at its first chunk
// (first chunks go out in send order, later chunks interleave): equal tags stay FIFO.
struct Message {
  uint64_t msg_id = 0;
  int64_t tag = 0;
  uint32_t channel = 0;
  uint32_t flags = 0;
  std::vector<int64_t> meta;
  std::shared_ptr<Buffer> buffer;
  bool complete = false;
  std::shared_ptr<Op> waiter;  // the receive it matched, completed with the last chunk
};

using Key = std::pair<uint32_t, int64_t>;  // (channel, tag)

struct Peer {
  int rank = -1;
  std::unique_ptr<Segment> out;  // this rank -> peer
  std::unique_ptr<Segment> in;   // peer -> this rank
  std::thread sender, receiver;
  // send queue (its own lock: the sender thread sleeps on it when idle)
  std::mutex send_mu;
  std::condition_variable send_cv;
  std::deque<std::shared_ptr<Op>> queued;
  uint64_t next_msg_id = 1;
  uint64_t arena_head = 0;  // next free position of the outgoing arena stream
  // matching, under the engine's signal mutex
  std::map<Key, std::deque<std::shared_ptr<Op>>> posted;
  std::map<Key, std::deque<std::shared_ptr<Message>>> staged;
  std::string gone;  // why nothing more comes from this peer (empty while it may)
  std::string send_gone;  // why nothing more can go to it
};

class Engine {
 public:
  // single_copy_bytes: messages from this size on are read from the sender's memory where
  // the pair allows it (0: never); copy_threads: how many threads split such a read.
  Engine(int rank, uint64_t chunk_bytes, uint64_t cache_bytes, uint64_t single_copy_bytes, int copy_threads)
      : rank_(rank), chunk_bytes_(chunk_bytes), single_copy_bytes_(single_copy_bytes), copy_threads_(std::max(copy_threads, 1)),
        signal_(std::make_shared<Signal>()), pool_(std::make_shared<Pool>(cache_bytes)) {}
  ~Engine() { close(); }

  void create_outgoing(int peer, const std::string& name, uint64_t slots, uint64_t arena_bytes) {
    slot(peer).out = Segment::create(name, slots, arena_bytes);
  }

  void open_incoming(int peer, const std::string& name) {
    Peer& p = slot(peer);
    p.in = Segment::open(name);
    shm_unlink(name.c_str());  // both ends have it mapped: the name is no longer needed
    SegmentHeader* h = p.in->header();
    if (single_copy_bytes_ && Reader::can_read(h->sender_pid, h->sender_base, kMagic)) {
      if (!reader_) reader_ = std::make_unique<Reader>(copy_threads_);
      h->single_copy.store(1, std::memory_order_release);  // seen by the sender after set-up's barrier
    }
  }

  // Whether messages from `peer` to this rank may be read from its memory.
  bool single_copy(int peer) {
    Peer& p = known(peer);
    return p.in->header()->single_copy.load(std::memory_order_acquire) != 0;
  }

  // Start every peer's threads; returns once each holds its life mutex.
  void start() {
    for (auto& [rank, p] : peers_) {
      if (!p->out || !p->in) throw std::runtime_error("peer " + std::to_string(rank) + " has only one direction set up");
    }
    auto started = std::make_shared<std::atomic<int>>(0);
    for (auto& [rank, p] : peers_) {
      Peer* peer = p.get();
      peer->sender = std::thread([this, peer, started] { send_loop(peer, started.get()); });
      peer->receiver = std::thread([this, peer, started] { receive_loop(peer, started.get()); });
    }
    int want = 2 * static_cast<int>(peers_.size());
    while (started->load() < want) std::this_thread::sleep_for(std::chrono::microseconds(100));
    running_ = true;
  }

  std::shared_ptr<Op> post_send(int peer, int64_t tag, uint32_t channel, uint32_t flags, const std::vector<int64_t>& meta,
                                uintptr_t ptr, uint64_t nbytes) {
    Peer& p = known(peer);
    auto op = std::make_shared<Op>();
    op->signal = signal_;
    op->peer = peer;
    op->tag = tag;
    op->channel = channel;
    op->flags = flags & ~0xffu;
    op->meta = meta;
    op->meta.resize(kMetaWords, 0);
    op->src = reinterpret_cast<const char*>(ptr);
    op->nbytes = nbytes;
    {
      std::lock_guard<std::mutex> g(signal_->mu);
      if (closed_ || !p.send_gone.empty()) {
        op->finish(State::kFailed, closed_ ? "the transport was closed" : p.send_gone);
        return op;
      }
    }
    {
      std::lock_guard<std::mutex> g(p.send_mu);
      op->msg_id = p.next_msg_id++;
      p.queued.push_back(op);
    }
    p.send_cv.notify_one();
    bump(&p.out->header()->tail_seq);  // in case the sender thread sleeps there (send_loop)
    return op;
  }

  std::shared_ptr<Op> post_recv(int peer, int64_t tag, uint32_t channel) {
    Peer& p = known(peer);
    auto op = std::make_shared<Op>();
    op->signal = signal_;
    op->peer = peer;
    op->tag = tag;
    op->channel = channel;
    std::lock_guard<std::mutex> g(signal_->mu);
    auto staged = p.staged.find({channel, tag});
    if (staged != p.staged.end() && !staged->second.empty()) {
      std::shared_ptr<Message> m = std::move(staged->second.front());
      staged->second.pop_front();
      if (m->complete) {
        deliver(op.get(), *m);
      } else if (!p.gone.empty()) {
        op->finish(State::kFailed, p.gone);  // its sender is gone before the last chunk
      } else {
        m->waiter = op;
      }
    } else if (closed_ || !p.gone.empty()) {
      op->finish(State::kFailed, closed_ ? "the transport was closed" : p.gone);
    } else {
      p.posted[{channel, tag}].push_back(op);
    }
    return op;
  }

  // Wait for the next message sent with the notify flag: (src, msg_id, tag, meta), or None.
  py::object pop_arrival(double timeout_s) {
    std::tuple<int, uint64_t, int64_t, std::vector<int64_t>> item;
    bool got = false;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> g(signal_->mu);
      signal_->cv.wait_for(g, std::chrono::duration<double>(timeout_s), [this] { return !arrivals_.empty() || closed_; });
      if (!arrivals_.empty()) {
        item = std::move(arrivals_.front());
        arrivals_.pop_front();
        got = true;
      }
    }
    if (!got) return py::none();
    return py::make_tuple(std::get<0>(item), std::get<1>(item), std::get<2>(item), std::get<3>(item));
  }

  // The receiver of the pair peer -> this rank says how far it has copied out of the
  // sender's device arena.
  void device_ack(int peer, uint64_t value) {
    SegmentHeader* h = known(peer).in->header();
    h->device_freed.store(value, std::memory_order_release);
    bump(&h->device_seq);
  }

  // Sender side: wait until the peer acknowledged `at_least` device bytes (or the timeout
  // passed); returns the acknowledged count. Raises if the peer died or closed.
  uint64_t wait_device_ack(int peer, uint64_t at_least, double timeout_s) {
    py::gil_scoped_release nogil;
    Peer& p = known(peer);
    SegmentHeader* h = p.out->header();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (true) {
      uint32_t seq = h->device_seq.load(std::memory_order_acquire);
      uint64_t v = h->device_freed.load(std::memory_order_acquire);
      if (v >= at_least || std::chrono::steady_clock::now() >= deadline) return v;
      Life life = probe(&h->receiver_life, h->receiver_up);
      if (life != Life::kAlive || stopping_) {
        throw std::runtime_error(stopping_ ? "the transport was closed" : describe_loss(p.rank, p.out->header()->receiver_pid, life));
      }
      futex_wait(&h->device_seq, seq, kLivenessMs);
    }
  }

  int peer_pid(int peer) {
    Peer& p = known(peer);
    return p.in ? p.in->header()->sender_pid : -1;
  }

  // Stop: flush what is queued, say goodbye, release the segments. Idempotent.
  void close() {
    {
      std::lock_guard<std::mutex> g(signal_->mu);
      if (closed_) return;
      closed_ = true;
      signal_->cv.notify_all();
    }
    stopping_ = true;
    for (auto& [rank, p] : peers_) {
      p->send_cv.notify_all();
      if (p->out) bump(&p->out->header()->tail_seq);
      if (p->in) bump(&p->in->header()->head_seq);
    }
    for (auto& [rank, p] : peers_) {
      if (p->sender.joinable()) p->sender.join();
      if (p->receiver.joinable()) p->receiver.join();
    }
    reader_.reset();
    // the segments stay mapped until the engine is destroyed: another Python thread may
    // still be inside wait_device_ack
    std::lock_guard<std::mutex> g(signal_->mu);
    for (auto& [rank, p] : peers_) {
      for (auto& [key, ops] : p->posted)
        for (auto& op : ops) op->finish(State::kFailed, "the transport was closed");
      p->posted.clear();
      p->staged.clear();
      std::lock_guard<std::mutex> sg(p->send_mu);
      for (auto& op : p->queued) op->finish(State::kFailed, "the transport was closed");
      p->queued.clear();
    }
  }

 private:
  Peer& slot(int peer) {
    auto& p = peers_[peer];
    if (!p) {
      p = std::make_unique<Peer>();
      p->rank = peer;
    }
    return *p;
  }

  Peer& known(int peer) {
    auto it = peers_.find(peer);
    if (it == peers_.end() || !running_ || closed_)
      throw std::invalid_argument(closed_ ? "the transport is closed" : "rank " + std::to_string(peer) + " is not a shared-memory peer of this rank");
    return *it->second;
  }

  std::string describe_loss(int peer, int pid, Life life) const {
    if (life == Life::kClosed) return "rank " + std::to_string(peer) + " closed its transport";
    return "rank " + std::to_string(peer) + " (pid " + std::to_string(pid) + ") died";
  }

  // ---- sending -------------------------------------------------------------------------

  void send_loop(Peer* p, std::atomic<int>* started) {
    SegmentHeader* h = p->out->header();
    hold(&h->sender_life);
    h->sender_up.store(1, std::memory_order_release);
    started->fetch_add(1);
    std::deque<std::shared_ptr<Op>> active;
    std::deque<std::shared_ptr<Op>> reading;  // sent by address: done once the peer read them
    std::string lost;
    while (lost.empty()) {
      uint32_t seq = h->tail_seq.load(std::memory_order_acquire);
      settle(p, reading);
      {
        std::unique_lock<std::mutex> g(p->send_mu);
        if (reading.empty()) p->send_cv.wait(g, [&] { return !p->queued.empty() || !active.empty() || stopping_; });
        while (!p->queued.empty()) {
          active.push_back(std::move(p->queued.front()));
          p->queued.pop_front();
        }
      }
      if (active.empty()) {
        if (reading.empty()) break;  // stopping, and everything queued went out
        // sleep until the receiver consumes a descriptor or a new send is posted (both bump)
        lost = send_gone(p);
        if (lost.empty()) lost = receiver_lost(p);
        if (lost.empty()) futex_wait(&h->tail_seq, seq, kLivenessMs);
        continue;
      }
      std::shared_ptr<Op> op = std::move(active.front());
      active.pop_front();
      lost = send_gone(p);
      if (lost.empty()) lost = push_chunk(p, op.get());
      if (!lost.empty()) {
        active.push_front(std::move(op));
        break;
      }
      if (op->sent < op->nbytes) active.push_back(std::move(op));  // round robin
      else if (op->remote) reading.push_back(std::move(op));
    }
    if (!lost.empty()) fail_sends(p, lost, active, reading);
    if (send_gone(p).empty()) publish_close(p);
    pthread_mutex_unlock(&h->sender_life);
  }

  // Finish the sends by address whose last descriptor the receiver has consumed.
  void settle(Peer* p, std::deque<std::shared_ptr<Op>>& reading) {
    uint64_t tail = p->out->header()->tail.load(std::memory_order_acquire);
    if (reading.empty() || reading.front()->last_desc >= tail) return;
    std::lock_guard<std::mutex> g(signal_->mu);
    while (!reading.empty() && reading.front()->last_desc < tail) {
      reading.front()->finish(State::kDone);
      reading.pop_front();
    }
  }

  std::string receiver_lost(Peer* p) {
    SegmentHeader* h = p->out->header();
    Life life = probe(&h->receiver_life, h->receiver_up);
    return life == Life::kAlive ? std::string() : describe_loss(p->rank, h->receiver_pid, life);
  }

  // Why the peer can take nothing more (its receiving side found it dead or closed), or "".
  std::string send_gone(Peer* p) {
    std::lock_guard<std::mutex> g(signal_->mu);
    return p->send_gone;
  }

  // Copy the next chunk of `op` into the arena and publish its descriptor; an empty string,
  // or why the peer cannot take it.
  std::string push_chunk(Peer* p, Op* op) {
    SegmentHeader* h = p->out->header();
    const uint64_t A = h->arena_bytes;
    // small chunks: the receiver copies each out while it is still in the shared cache
    const uint64_t max_chunk = std::max<uint64_t>(std::min(A / 4, chunk_bytes_ ? chunk_bytes_ : A), 1);
    if (op->sent == 0)
      op->remote = single_copy_bytes_ && op->nbytes >= single_copy_bytes_ && h->single_copy.load(std::memory_order_acquire);
    if (op->remote) return push_address(p, op);
    uint64_t len = std::min(op->nbytes - op->sent, max_chunk);
    uint64_t pos = p->arena_head;
    if (A - pos % A < len) pos += A - pos % A;  // a chunk never wraps: skip to the start
    std::string lost = wait_for_room(p, [&] {
      return h->head.load(std::memory_order_relaxed) - h->tail.load(std::memory_order_acquire) < h->ring_slots &&
             pos + len - h->arena_freed.load(std::memory_order_acquire) <= A;
    });
    if (!lost.empty()) return lost;
    std::memcpy(p->out->arena() + pos % A, op->src + op->sent, len);
    p->arena_head = pos + len;
    publish(p, op, pos, len, 0);
    if (op->sent == op->nbytes) {
      std::lock_guard<std::mutex> g(signal_->mu);
      op->finish(State::kDone);
    }
    return {};
  }

  // The next chunk of `op` by address: a descriptor only; the receiver reads the bytes from
  // our memory. Chunks of a few MiB keep the round robin fair to small messages behind it.
  std::string push_address(Peer* p, Op* op) {
    SegmentHeader* h = p->out->header();
    uint64_t len = std::min(op->nbytes - op->sent, kAddressChunk);
    std::string lost = wait_for_room(p, [&] { return h->head.load(std::memory_order_relaxed) - h->tail.load(std::memory_order_acquire) < h->ring_slots; });
    if (!lost.empty()) return lost;
    op->last_desc = publish(p, op, reinterpret_cast<uint64_t>(op->src + op->sent), len, kRemote);
    return {};
  }

  // Publish the descriptor of `op`'s next `len` bytes, found at `where` (an arena position, or
  // with kRemote an address of ours); the caller made room for it. Returns its ring index.
  uint64_t publish(Peer* p, Op* op, uint64_t where, uint64_t len, uint32_t flags) {
    SegmentHeader* h = p->out->header();
    uint64_t head = h->head.load(std::memory_order_relaxed);
    Desc& d = p->out->ring()[head % h->ring_slots];
    d.msg_id = op->msg_id;
    d.tag = op->tag;
    d.total = op->nbytes;
    d.offset = op->sent;
    d.arena_pos = where;
    d.len = len;
    d.channel = op->channel;
    d.flags = op->flags | flags | (op->sent == 0 ? kFirst : 0) | (op->sent + len == op->nbytes ? kLast : 0);
    std::copy(op->meta.begin(), op->meta.end(), d.meta);
    op->sent += len;
    h->head.store(head + 1, std::memory_order_release);
    bump(&h->head_seq);
    return head;
  }

  template <class Ready>
  std::string wait_for_room(Peer* p, Ready ready) {
    SegmentHeader* h = p->out->header();
    while (true) {
      uint32_t seq = h->tail_seq.load(std::memory_order_acquire);
      if (ready()) return {};
      Life life = probe(&h->receiver_life, h->receiver_up);
      if (life != Life::kAlive) return describe_loss(p->rank, h->receiver_pid, life);
      futex_wait(&h->tail_seq, seq, kLivenessMs);
    }
  }

  void fail_sends(Peer* p, const std::string& why, std::deque<std::shared_ptr<Op>>& active, std::deque<std::shared_ptr<Op>>& reading) {
    std::lock_guard<std::mutex> g(signal_->mu);
    p->send_gone = why;
    for (auto& op : active) op->finish(State::kFailed, why);
    for (auto& op : reading) op->finish(State::kFailed, why);
    std::lock_guard<std::mutex> sg(p->send_mu);
    for (auto& op : p->queued) op->finish(State::kFailed, why);
    p->queued.clear();
  }

  void publish_close(Peer* p) {
    SegmentHeader* h = p->out->header();
    std::string lost = wait_for_room(p, [&] { return h->head.load(std::memory_order_relaxed) - h->tail.load(std::memory_order_acquire) < h->ring_slots; });
    if (!lost.empty()) return;
    uint64_t head = h->head.load(std::memory_order_relaxed);
    Desc& d = p->out->ring()[head % h->ring_slots];
    std::memset(&d, 0, sizeof(Desc));
    d.flags = kClose;
    d.arena_pos = p->arena_head;
    h->head.store(head + 1, std::memory_order_release);
    bump(&h->head_seq);
  }

  // ---- receiving -----------------------------------------------------------------------

  void receive_loop(Peer* p, std::atomic<int>* started) {
    SegmentHeader* h = p->in->header();
    hold(&h->receiver_life);
    h->receiver_up.store(1, std::memory_order_release);
    started->fetch_add(1);
    std::map<uint64_t, std::shared_ptr<Message>> partial;
    uint64_t tail = h->tail.load(std::memory_order_relaxed);
    auto last_probe = std::chrono::steady_clock::now();
    std::string why;
    while (why.empty()) {
      uint32_t seq = h->head_seq.load(std::memory_order_acquire);
      if (tail != h->head.load(std::memory_order_acquire)) {
        why = take(p, h, tail, partial);
        h->tail.store(++tail, std::memory_order_release);
        bump(&h->tail_seq);
        continue;
      }
      if (stopping_) {
        why = "the transport was closed";
        break;
      }
      auto now = std::chrono::steady_clock::now();
      if (now - last_probe >= std::chrono::milliseconds(kLivenessMs)) {
        last_probe = now;
        Life life = probe(&h->sender_life, h->sender_up);
        // its last descriptors may have landed after the check above: drain before failing
        if (life != Life::kAlive && tail == h->head.load(std::memory_order_acquire)) why = describe_loss(p->rank, h->sender_pid, life);
        if (!why.empty()) break;
      }
      futex_wait(&h->head_seq, seq, kLivenessMs);
    }
    {
      std::lock_guard<std::mutex> g(signal_->mu);
      p->gone = why;
      if (!stopping_ && p->send_gone.empty()) p->send_gone = why;  // a dead or closed peer takes nothing either
      for (auto& [key, ops] : p->posted)
        for (auto& op : ops) op->finish(State::kFailed, why);
      p->posted.clear();
      for (auto& [id, m] : partial)
        if (m->waiter) m->waiter->finish(State::kFailed, why);
    }
    pthread_mutex_unlock(&h->receiver_life);
  }

  // Consume descriptor `index`; non-empty when the sender said goodbye.
  std::string take(Peer* p, SegmentHeader* h, uint64_t index, std::map<uint64_t, std::shared_ptr<Message>>& partial) {
    const Desc d = p->in->ring()[index % h->ring_slots];
    if (d.flags & kClose) return "rank " + std::to_string(p->rank) + " closed its transport";
    Message* m;
    if (d.flags & kFirst) {
      auto fresh = std::make_shared<Message>();
      fresh->msg_id = d.msg_id;
      fresh->tag = d.tag;
      fresh->channel = d.channel;
      fresh->flags = d.flags & ~0xffu;
      fresh->meta.assign(d.meta, d.meta + kMetaWords);
      fresh->buffer = std::make_shared<Buffer>(d.total, pool_);
      m = fresh.get();
      arrive(p, fresh);
      partial[d.msg_id] = std::move(fresh);
    } else {
      auto it = partial.find(d.msg_id);
      if (it == partial.end()) {  // cannot happen with a well-behaved sender: drop the chunk
        h->arena_freed.store(d.arena_pos + d.len, std::memory_order_release);
        return {};
      }
      m = it->second.get();
    }
    if (d.flags & kRemote) {
      if (!reader_) return "rank " + std::to_string(p->rank) + " sent a message by address, which this pair did not agree to";
      int err = d.len ? reader_->read(h->sender_pid, m->buffer->data() + d.offset, d.arena_pos, d.len) : 0;
      if (err == ESRCH) return describe_loss(p->rank, h->sender_pid, Life::kDead);
      if (err) return "cannot read a message from rank " + std::to_string(p->rank) + "'s memory: " + std::strerror(err);
    } else {
      if (d.len) std::memcpy(m->buffer->data() + d.offset, p->in->arena() + d.arena_pos % h->arena_bytes, d.len);
      h->arena_freed.store(d.arena_pos + d.len, std::memory_order_release);
    }
    if (d.flags & kLast) {
      complete(p, m);
      partial.erase(d.msg_id);
    }
    return {};
  }

  // A first chunk: match the message to the oldest receive posted for it, or stage it.
  void arrive(Peer* p, const std::shared_ptr<Message>& m) {
    std::lock_guard<std::mutex> g(signal_->mu);
    auto posted = p->posted.find({m->channel, m->tag});
    if (posted != p->posted.end() && !posted->second.empty()) {
      m->waiter = std::move(posted->second.front());
      posted->second.pop_front();
    } else {
      p->staged[{m->channel, m->tag}].push_back(m);
    }
  }

  void complete(Peer* p, Message* m) {
    std::lock_guard<std::mutex> g(signal_->mu);
    m->complete = true;
    if (m->flags & kNotify) {
      arrivals_.emplace_back(p->rank, m->msg_id, m->tag, m->meta);
      signal_->cv.notify_all();
    }
    if (m->waiter) {
      deliver(m->waiter.get(), *m);
      m->waiter.reset();
    }
  }

  // callers hold signal_->mu
  static void deliver(Op* op, const Message& m) {
    op->buffer = m.buffer;
    op->meta = m.meta;
    op->msg_id = m.msg_id;
    op->finish(State::kDone);
  }

  static constexpr uint64_t kAddressChunk = 8 << 20;

  int rank_;
  uint64_t chunk_bytes_;
  uint64_t single_copy_bytes_;
  int copy_threads_;
  std::unique_ptr<Reader> reader_;  // set up before the threads start, gone after they stop
  std::shared_ptr<Signal> signal_;
  std::shared_ptr<Pool> pool_;
  std::map<int, std::unique_ptr<Peer>> peers_;
  std::deque<std::tuple<int, uint64_t, int64_t, std::vector<int64_t>>> arrivals_;
  std::atomic<bool> running_{false};
  std::atomic<bool> closed_{false};
  std::atomic<bool> stopping_{false};
};

// Op's Python face: test() never blocks; wait() sleeps without the GIL.
bool op_wait(Op& op, std::optional<double> timeout) {
  py::gil_scoped_release nogil;
  std::unique_lock<std::mutex> g(op.signal->mu);
  auto done = [&] { return op.state != State::kPending; };
  if (!timeout) {
    op.signal->cv.wait(g, done);
    return true;
  }
  return op.signal->cv.wait_for(g, std::chrono::duration<double>(std::max(0.0, *timeout)), done);
}

}  // namespace

PYBIND11_MODULE(_shm, m) {
  m.doc() = "Shared-memory rings for mapp.transport (see mapp/transport/shm.py).";
  m.attr("META_WORDS") = kMetaWords;
  m.attr("NOTIFY") = kNotify;

  py::class_<Buffer, std::shared_ptr<Buffer>>(m, "Buffer", py::buffer_protocol())
      .def_buffer([](Buffer& b) -> py::buffer_info {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1, {static_cast<py::ssize_t>(b.size())}, {1});
      })
      .def("__len__", &Buffer::size);

  py::class_<Op, std::shared_ptr<Op>>(m, "Op")
      .def("test", [](Op& op) {
        std::lock_guard<std::mutex> g(op.signal->mu);
        return op.state != State::kPending;
      })
      .def("wait", &op_wait, py::arg("timeout") = py::none())
      .def_property_readonly("error", [](Op& op) -> py::object {
        std::lock_guard<std::mutex> g(op.signal->mu);
        return op.state == State::kFailed ? py::cast(op.error) : py::none();
      })
      .def_property_readonly("meta", [](Op& op) {
        std::lock_guard<std::mutex> g(op.signal->mu);
        return op.meta;
      })
      .def_property_readonly("msg_id", [](Op& op) { return op.msg_id; })
      .def_property_readonly("buffer", [](Op& op) -> py::object {
        std::lock_guard<std::mutex> g(op.signal->mu);
        return op.buffer ? py::cast(op.buffer) : py::none();
      });

  py::class_<Engine>(m, "Engine")
      .def(py::init<int, uint64_t, uint64_t, uint64_t, int>(), py::arg("rank"), py::arg("chunk_bytes") = 0, py::arg("cache_bytes") = 0,
           py::arg("single_copy_bytes") = 0, py::arg("copy_threads") = 1)
      .def("single_copy", &Engine::single_copy, py::arg("peer"))
      .def("create_outgoing", &Engine::create_outgoing, py::arg("peer"), py::arg("name"), py::arg("ring_slots"), py::arg("arena_bytes"))
      .def("open_incoming", &Engine::open_incoming, py::arg("peer"), py::arg("name"))
      .def("start", &Engine::start, py::call_guard<py::gil_scoped_release>())
      .def("post_send", &Engine::post_send, py::arg("peer"), py::arg("tag"), py::arg("channel"), py::arg("flags"), py::arg("meta"), py::arg("ptr"), py::arg("nbytes"))
      .def("post_recv", &Engine::post_recv, py::arg("peer"), py::arg("tag"), py::arg("channel") = 0)
      .def("pop_arrival", &Engine::pop_arrival, py::arg("timeout"))
      .def("device_ack", &Engine::device_ack, py::arg("peer"), py::arg("value"))
      .def("wait_device_ack", &Engine::wait_device_ack, py::arg("peer"), py::arg("at_least"), py::arg("timeout"))
      .def("peer_pid", &Engine::peer_pid, py::arg("peer"))
      .def("close", &Engine::close, py::call_guard<py::gil_scoped_release>());

  m.def("unlink", [](const std::string& name) { return shm_unlink(name.c_str()) == 0; }, py::arg("name"),
        "Remove a segment name; False when it was already gone.");
}
