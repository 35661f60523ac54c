/* SPDX-License-Identifier: BSD-3-Clause */
// ProcessGroupCohort (process_group.hpp says how it works).
#include <Python.h>   // first, as Python asks: the destructor releases the GIL

#include "process_group.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include <ATen/ATen.h>

namespace cohort_torch {

namespace {

using c10d::OpType;

// "cohort <op> on rank r: <what>" as a torch error (a RuntimeError in Python).
#define COHORT_CHECK(cond, fn, ...) TORCH_CHECK(cond, "cohort ", fn, ": ", __VA_ARGS__)

std::string cohort_message(cohort_status_t st)
{
  return std::string(cohort_strerror(st)) + ": " + cohort_last_error();
}

void check_tensor(const at::Tensor& t, const char* fn)
{
  COHORT_CHECK(t.defined(), fn, "a tensor is undefined");
  COHORT_CHECK(t.device().is_cpu(), fn, "only CPU tensors are supported, this one is on ",
               t.device().str(), " (move it with .cpu())");
  COHORT_CHECK(t.layout() == at::kStrided, fn, "sparse tensors are not supported (layout ",
               t.layout(), "); pass a dense tensor (.to_dense())");
}

const at::Tensor& single(std::vector<at::Tensor>& ts, const char* fn)
{
  COHORT_CHECK(ts.size() == 1, fn, "takes exactly one tensor per call on CPU, got ", ts.size());
  check_tensor(ts[0], fn);
  return ts[0];
}

// How a reduction travels: cohort dtype and op, elements per tensor element (complex: 2), and
// the dtype to stage in when the tensor's own has no cohort dtype (int16 reduces as int32:
// modular sums, products, minima and maxima agree once cast back).
struct Reduction {
  cohort_dtype_t dt;
  cohort_op_t op;
  int64_t mult = 1;
  c10::optional<at::ScalarType> stage;
};

Reduction reduction(at::ScalarType type, const c10d::ReduceOp& rop, const char* fn)
{
  Reduction r{COHORT_FLOAT32, COHORT_SUM, 1, c10::nullopt};
  switch (rop.op_) {
    case c10d::ReduceOp::SUM: r.op = COHORT_SUM; break;
    case c10d::ReduceOp::AVG: r.op = COHORT_AVG; break;
    case c10d::ReduceOp::PRODUCT: r.op = COHORT_PROD; break;
    case c10d::ReduceOp::MIN: r.op = COHORT_MIN; break;
    case c10d::ReduceOp::MAX: r.op = COHORT_MAX; break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      COHORT_CHECK(false, fn, "the bitwise reductions (BAND, BOR, BXOR) are not supported; "
                   "cohort reduces with SUM, AVG, PRODUCT, MIN and MAX");
    default:
      COHORT_CHECK(false, fn, "reduce op ", (int)rop.op_, " (PREMUL_SUM or unknown) is not "
                   "supported; cohort reduces with SUM, AVG, PRODUCT, MIN and MAX");
  }
  bool additive = r.op == COHORT_SUM || r.op == COHORT_AVG;
  switch (type) {
    case at::kFloat: r.dt = COHORT_FLOAT32; break;
    case at::kDouble: r.dt = COHORT_FLOAT64; break;
    case at::kHalf: r.dt = COHORT_FLOAT16; break;
    case at::kBFloat16: r.dt = COHORT_BFLOAT16; break;
    case at::kChar: r.dt = COHORT_INT8; break;
    case at::kByte: r.dt = COHORT_UINT8; break;
    case at::kInt: r.dt = COHORT_INT32; break;
    case at::kLong: r.dt = COHORT_INT64; break;
    case at::kShort:
      r.dt = COHORT_INT32;
      r.stage = at::kInt;
      break;
    case at::kBool:
      // logical or (SUM, MAX) and logical and (PRODUCT, MIN) of 0/1 bytes
      COHORT_CHECK(r.op != COHORT_AVG, fn, "AVG of bool tensors is not defined");
      r.dt = COHORT_UINT8;
      r.op = r.op == COHORT_SUM || r.op == COHORT_MAX ? COHORT_MAX : COHORT_MIN;
      break;
    case at::kComplexFloat:
    case at::kComplexDouble:
    case at::kComplexHalf:
      COHORT_CHECK(additive, fn, "complex tensors reduce with SUM and AVG only (",
                   c10::toString(type), ")");
      r.dt = type == at::kComplexFloat ? COHORT_FLOAT32
             : type == at::kComplexDouble ? COHORT_FLOAT64 : COHORT_FLOAT16;
      r.mult = 2;
      break;
    default:
      COHORT_CHECK(false, fn, "tensors of dtype ", c10::toString(type), " cannot be reduced");
  }
  return r;
}

// A contiguous buffer cohort works in for t, of dtype stage when given: t itself when it is
// contiguous of its own dtype, else a staging tensor (holding t's values when init) copied back
// to t by the watcher before the Work completes.
at::Tensor buffer_for(WorkCohort& w, at::Tensor t, c10::optional<at::ScalarType> stage, bool init)
{
  if (!stage && t.is_contiguous()) return t;
  at::ScalarType type = stage ? *stage : t.scalar_type();
  at::Tensor b = init ? t.to(type, /*non_blocking=*/false, /*copy=*/true,
                             at::MemoryFormat::Contiguous)
                      : at::empty(t.sizes(), t.options().dtype(type));
  w.keep.push_back(b);
  w.post.push_back([t, b]() mutable { t.copy_(b); });
  return b;
}

// t's values in a contiguous tensor cohort only reads.
at::Tensor input_of(WorkCohort& w, const at::Tensor& t,
                    c10::optional<at::ScalarType> stage = c10::nullopt)
{
  at::Tensor b = stage ? t.to(*stage).contiguous() : t.contiguous();
  w.keep.push_back(b);
  return b;
}

size_t nbytes(const at::Tensor& t) { return (size_t)t.numel() * t.element_size(); }

// Bytes [off, off + n) of a contiguous byte tensor, viewed as t's dtype and shape.
at::Tensor bytes_as(const at::Tensor& flat, size_t off, const at::Tensor& like)
{
  return flat.narrow(0, (int64_t)off, (int64_t)nbytes(like))
      .view(like.scalar_type())
      .view(like.sizes());
}

// The tensors' bytes, one after the other, in a new byte tensor.
at::Tensor concat_bytes(const std::vector<at::Tensor>& ts)
{
  size_t total = 0;
  for (auto& t : ts) total += nbytes(t);
  at::Tensor flat = at::empty({(int64_t)total}, at::kByte);
  size_t off = 0;
  for (auto& t : ts) {
    if (t.numel()) bytes_as(flat, off, t).copy_(t);
    off += nbytes(t);
  }
  return flat;
}

// The watcher copies flat's bytes into the tensors in order.
void scatter_bytes_later(WorkCohort& w, at::Tensor flat, std::vector<at::Tensor> outs)
{
  w.post.push_back([flat, outs]() mutable {
    size_t off = 0;
    for (auto& o : outs) {
      if (o.numel()) o.copy_(bytes_as(flat, off, o));
      off += nbytes(o);
    }
  });
}

void same_type(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* fn)
{
  for (auto& t : ts) {
    check_tensor(t, fn);
    COHORT_CHECK(t.scalar_type() == like.scalar_type(), fn, "tensors of different dtypes (",
                 c10::toString(t.scalar_type()), " and ", c10::toString(like.scalar_type()),
                 ")");
  }
}

// The c10d Store as cohort's out-of-band allgather: every rank sets its bytes under a key of
// the round and gets everyone's (Store::get waits, up to the store's timeout). Each rank counts
// its creations with the same store, so a process group made again over one store never reads
// the keys of an earlier one; a rank deletes its key of a round once the next round completed
// (everyone has read it by then).
struct StoreGather {
  c10::intrusive_ptr<c10d::Store> store;
  int rank, size;
  std::string prefix;
  int round = 0;
  std::string error;

  std::string key(int round_, int r) const
  {
    return prefix + std::to_string(round_) + "/" + std::to_string(r);
  }

  static int call(const void* send, void* recv, size_t n, void* ctx)
  {
    auto* g = static_cast<StoreGather*>(ctx);
    try {
      const auto* s = static_cast<const uint8_t*>(send);
      g->store->set(g->key(g->round, g->rank), std::vector<uint8_t>(s, s + n));
      for (int r = 0; r < g->size; r++) {
        std::vector<uint8_t> v = g->store->get(g->key(g->round, r));
        if (v.size() != n) {
          g->error = "rank " + std::to_string(r) + " sent " + std::to_string(v.size()) +
                     " bytes in round " + std::to_string(g->round) + ", this rank " +
                     std::to_string(n) + " (another cohort version?)";
          return 1;
        }
        std::memcpy(static_cast<uint8_t*>(recv) + (size_t)r * n, v.data(), n);
      }
      if (g->round > 0) g->store->deleteKey(g->key(g->round - 1, g->rank));
      g->round++;
      return 0;
    } catch (const std::exception& e) {
      g->error = e.what();
      return 1;
    }
  }
};

// The first group of a process whose ranks are exactly cohortrun's job (every rank decides the
// same: same environment, same sequence of groups). Once per process: cohort_comm_init joins
// the job once.
bool joins_cohortrun_job(int rank, int size)
{
  static std::atomic<bool> joined{false};
  const char* rdv = std::getenv("COHORT_RENDEZVOUS");
  const char* r = std::getenv("COHORT_RANK");
  const char* n = std::getenv("COHORT_SIZE");
  if (!rdv || !*rdv || !r || !n || std::atoi(r) != rank || std::atoi(n) != size) return false;
  return !joined.exchange(true);
}

}  // namespace

// ---- WorkCohort ---------------------------------------------------------------------------

WorkCohort::WorkCohort(int rank, OpType type, const char* name, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type), op_name(name), outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get())))
{
}

WorkCohort::~WorkCohort() = default;

void WorkCohort::complete(cohort_status_t st, const std::string& msg)
{
  std::exception_ptr err;
  if (st == COHORT_SUCCESS) {
    try {
      for (auto& p : post) p();
    } catch (const std::exception& e) {
      err = std::make_exception_ptr(std::runtime_error(
          std::string("cohort ") + op_name + ": copying the result out failed: " + e.what()));
    }
  } else {
    err = std::make_exception_ptr(std::runtime_error(std::string("cohort ") + op_name +
                                                     " failed: " + msg));
  }
  keep.clear();
  post.clear();
  finish(err);
  if (err) future_->setError(err);
  else future_->markCompleted(c10::IValue(outputs_));
}

// ---- ProcessGroupCohort -------------------------------------------------------------------

ProcessGroupCohort::ProcessGroupCohort(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, double timeout_s)
    : c10d::ProcessGroup(rank, size)
{
  StoreGather g{store, rank, size, "", 0, ""};
  // this rank's count of cohort process groups made over this store (every rank's agrees)
  int64_t nth = store->add("cohort/made/" + std::to_string(rank), 1);
  g.prefix = "cohort/" + std::to_string(nth) + "/";
  store_ = store;
  key_prefix_ = g.prefix;
  cohort_status_t st;
  if (joins_cohortrun_job(rank, size)) {
    // the whole job launched by cohortrun: join it through its rendezvous, whose control
    // channel tells every rank which rank failed first even when the store's host (rank 0) is
    // gone (communicators made through a store have no such channel)
    st = cohort_comm_init(&comm_);
    if (st == COHORT_SUCCESS && (st = cohort_comm_set_timeout(comm_, timeout_s))) {
      cohort_comm_destroy(comm_);
      comm_ = nullptr;
    }
  } else {
    st = cohort_comm_init_oob_timeout(rank, size, StoreGather::call, &g, timeout_s, &comm_);
  }
  TORCH_CHECK(st == COHORT_SUCCESS, "cohort: creating the process group (rank ", rank, " of ",
              size, ") failed: ", cohort_message(st),
              g.error.empty() ? "" : " (the c10d store said: " + g.error + ")");
  watcher_ = std::thread([this] { watch(); });
}

ProcessGroupCohort::~ProcessGroupCohort()
{
  {
    std::lock_guard<std::mutex> lk(q_mu_);
    stop_ = true;
  }
  q_cv_.notify_all();
  // The watcher finishes what is queued first (each wait bounded by the communicator's
  // timeout), and the last reference to a Work's tensor may be its own: freeing a tensor whose
  // Python object C++ keeps alive takes the GIL. A process group freed from Python (its
  // dealloc holds the GIL) would so wait for a thread that waits for it: let go of the GIL here.
  PyThreadState* saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
  if (watcher_.joinable()) watcher_.join();
  if (comm_) cohort_comm_destroy(comm_);
  if (saved) PyEval_RestoreThread(saved);
}

void ProcessGroupCohort::watch()
{
  for (;;) {
    c10::intrusive_ptr<WorkCohort> w;
    {
      std::unique_lock<std::mutex> lk(q_mu_);
      q_cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      w = queue_.front();
      queue_.pop_front();
    }
    cohort_status_t first = COHORT_SUCCESS;
    std::string msg;
    for (cohort_request_t* r : w->reqs) {
      cohort_status_t st = cohort_wait(r);
      if (st && !first) {
        first = st;
        msg = cohort_message(st);
      }
    }
    w->reqs.clear();
    if (first) msg = groupFailure(msg);
    w->complete(first, msg);
  }
}

// Communicators made through a store have no job control channel (cohort_comm_init_oob), so a
// rank that failed only because a neighbour hung up after its own failure would name that
// neighbour, not the rank at fault. The store is the group's channel instead: the first rank to
// fail posts its message, and a rank failing later adds that first failure to its own message
// (waiting up to a second for it to be posted). Store errors are ignored: the store's host may
// be the rank that died.
std::string ProcessGroupCohort::groupFailure(const std::string& mine)
{
  if (failed_) return mine;
  failed_ = true;
  try {
    std::string key = key_prefix_ + "failure";
    std::string me = "rank " + std::to_string(rank_) + ": " + mine;
    if (store_->add(key_prefix_ + "failures", 1) == 1) {
      store_->set(key, std::vector<uint8_t>(me.begin(), me.end()));
      return mine;
    }
    store_->wait({key}, std::chrono::milliseconds(1000));
    std::vector<uint8_t> v = store_->get(key);
    return mine + " [the first failure in this process group was on " +
           std::string(v.begin(), v.end()) + "]";
  } catch (const std::exception&) {
    return mine;
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::run(OpType type, const char* name,
                                                       std::vector<at::Tensor> outputs,
                                                       const Issue& issue)
{
  auto w = c10::make_intrusive<WorkCohort>(rank_, type, name, std::move(outputs));
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lk(issue_mu_);
    try {
      issue(*w);
    } catch (...) {
      err = std::current_exception();
    }
    if (sequenceNum_) sequenceNum_->increment();
  }
  if (err && w->reqs.empty()) std::rethrow_exception(err);
  {
    // requests already issued are waited for even when a later call of the same operation was
    // refused (the error still reaches the caller below)
    std::lock_guard<std::mutex> lk(q_mu_);
    queue_.push_back(w);
  }
  q_cv_.notify_one();
  if (err) std::rethrow_exception(err);
  return w;
}

// Issues one cohort call: its request joins the Work, a refusal throws cohort's message.
#define ISSUE(w, call)                                                                   \
  do {                                                                                   \
    cohort_request_t* req_ = nullptr;                                                    \
    cohort_status_t st_ = call;                                                          \
    TORCH_CHECK(st_ == COHORT_SUCCESS, "cohort ", (w).op_name, ": ", cohort_message(st_)); \
    (w).reqs.push_back(req_);                                                            \
  } while (0)
#define REQ (&req_)

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts)
{
  const at::Tensor& t = single(tensors, "allreduce");
  Reduction r = reduction(t.scalar_type(), opts.reduceOp, "allreduce");
  return run(OpType::ALLREDUCE, "allreduce", tensors, [&](WorkCohort& w) {
    at::Tensor b = buffer_for(w, t, r.stage, true);
    ISSUE(w, cohort_iallreduce(comm_, b.data_ptr(), b.data_ptr(), (size_t)(b.numel() * r.mult),
                               r.dt, r.op, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts)
{
  COHORT_CHECK(!tensors.empty(), "allreduce_coalesced", "no tensors");
  same_type(tensors, tensors[0], "allreduce_coalesced");
  Reduction r = reduction(tensors[0].scalar_type(), opts.reduceOp, "allreduce_coalesced");
  return run(OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, [&](WorkCohort& w) {
    // one group: cohort's engine fuses the allreduces into as few as its threshold allows
    cohort_status_t st = cohort_group_start(comm_);
    TORCH_CHECK(st == COHORT_SUCCESS, "cohort allreduce_coalesced: ", cohort_message(st));
    std::exception_ptr err;
    try {
      for (auto& t : tensors) {
        at::Tensor b = buffer_for(w, t, r.stage, true);
        ISSUE(w, cohort_iallreduce(comm_, b.data_ptr(), b.data_ptr(),
                                   (size_t)(b.numel() * r.mult), r.dt, r.op, REQ));
      }
    } catch (...) {
      err = std::current_exception();
    }
    st = cohort_group_end(comm_);
    if (err) std::rethrow_exception(err);
    TORCH_CHECK(st == COHORT_SUCCESS, "cohort allreduce_coalesced: ", cohort_message(st));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts)
{
  const at::Tensor& t = single(tensors, "broadcast");
  COHORT_CHECK(opts.rootTensor == 0, "broadcast", "rootTensor ", opts.rootTensor,
               " (one tensor per rank: 0)");
  return run(OpType::BROADCAST, "broadcast", tensors, [&](WorkCohort& w) {
    at::Tensor b = buffer_for(w, t, c10::nullopt, rank_ == opts.rootRank);
    ISSUE(w, cohort_ibroadcast(comm_, b.data_ptr(), nbytes(b), COHORT_UINT8, (int)opts.rootRank,
                               REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts)
{
  const at::Tensor& t = single(tensors, "reduce");
  COHORT_CHECK(opts.rootTensor == 0, "reduce", "rootTensor ", opts.rootTensor,
               " (one tensor per rank: 0)");
  Reduction r = reduction(t.scalar_type(), opts.reduceOp, "reduce");
  return run(OpType::REDUCE, "reduce", tensors, [&](WorkCohort& w) {
    at::Tensor b = buffer_for(w, t, r.stage, true);
    void* out = rank_ == opts.rootRank ? b.data_ptr() : nullptr;
    ISSUE(w, cohort_ireduce(comm_, b.data_ptr(), out, (size_t)(b.numel() * r.mult), r.dt, r.op,
                            (int)opts.rootRank, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&)
{
  const at::Tensor& in = single(inputs, "allgather");
  COHORT_CHECK(outputs.size() == 1 && outputs[0].size() == (size_t)size_, "allgather",
               "needs one list of ", size_, " output tensors (one per rank)");
  std::vector<at::Tensor>& outs = outputs[0];
  same_type(outs, in, "allgather");
  return run(OpType::ALLGATHER, "allgather", outs, [&](WorkCohort& w) {
    at::Tensor src = input_of(w, in);
    std::vector<size_t> counts(size_), displs(size_);
    size_t total = 0;
    bool equal = true;
    for (int r = 0; r < size_; r++) {
      counts[r] = nbytes(outs[r]);
      displs[r] = total;
      total += counts[r];
      equal &= counts[r] == nbytes(src);
    }
    at::Tensor flat = at::empty({(int64_t)total}, at::kByte);
    w.keep.push_back(flat);
    scatter_bytes_later(w, flat, outs);
    // ranks' tensors of different sizes: the v-variant (every rank passes the same sizes)
    if (equal)
      ISSUE(w, cohort_iallgather(comm_, src.data_ptr(), flat.data_ptr(), nbytes(src),
                                 COHORT_UINT8, REQ));
    else
      ISSUE(w, cohort_iallgatherv(comm_, src.data_ptr(), nbytes(src), flat.data_ptr(),
                                  counts.data(), displs.data(), COHORT_UINT8, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::_allgather_base(at::Tensor& output,
                                                                   at::Tensor& input,
                                                                   const c10d::AllgatherOptions&)
{
  check_tensor(input, "_allgather_base");
  same_type({output}, input, "_allgather_base");
  COHORT_CHECK(output.numel() == input.numel() * size_, "_allgather_base", "the output holds ",
               output.numel(), " elements, not world size ", size_, " x the input's ",
               input.numel());
  return run(OpType::_ALLGATHER_BASE, "_allgather_base", {output}, [&](WorkCohort& w) {
    at::Tensor out = buffer_for(w, output, c10::nullopt, false);
    // the in-place form (input is this rank's block of output) stays in place
    const char* slot = static_cast<const char*>(out.data_ptr()) + (size_t)rank_ * nbytes(input);
    at::Tensor src = input.is_contiguous() && input.data_ptr() == slot ? input
                                                                       : input_of(w, input);
    ISSUE(w, cohort_iallgather(comm_, src.data_ptr(), out.data_ptr(), nbytes(src), COHORT_UINT8,
                               REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&)
{
  const char* fn = "allgather_coalesced";
  COHORT_CHECK(outputs.size() == (size_t)size_, fn, "needs ", size_,
               " output lists (one per rank), got ", outputs.size());
  for (auto& t : inputs) check_tensor(t, fn);
  std::vector<at::Tensor> flat_outs;
  for (auto& list : outputs) {
    COHORT_CHECK(list.size() == inputs.size(), fn, "every output list holds one tensor per "
                 "input (", inputs.size(), "), one holds ", list.size());
    for (size_t i = 0; i < list.size(); i++) {
      check_tensor(list[i], fn);
      COHORT_CHECK(nbytes(list[i]) == nbytes(inputs[i]) &&
                       list[i].scalar_type() == inputs[i].scalar_type(),
                   fn, "output tensor ", i, " differs from input ", i, " in size or dtype");
      flat_outs.push_back(list[i]);
    }
  }
  return run(OpType::ALLGATHER_COALESCED, fn, flat_outs, [&](WorkCohort& w) {
    // the inputs, packed, allgathered as one block per rank
    at::Tensor src = concat_bytes(inputs);
    at::Tensor flat = at::empty({src.numel() * size_}, at::kByte);
    w.keep.push_back(src);
    w.keep.push_back(flat);
    scatter_bytes_later(w, flat, flat_outs);
    ISSUE(w, cohort_iallgather(comm_, src.data_ptr(), flat.data_ptr(), (size_t)src.numel(),
                               COHORT_UINT8, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts)
{
  const at::Tensor& in = single(inputs, "gather");
  int root = (int)opts.rootRank;
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    COHORT_CHECK(outputs.size() == 1 && outputs[0].size() == (size_t)size_, "gather",
                 "the root needs one list of ", size_, " output tensors");
    outs = outputs[0];
    same_type(outs, in, "gather");
    for (auto& o : outs)
      COHORT_CHECK(nbytes(o) == nbytes(in), "gather", "output tensors must have the input's "
                   "size (", in.numel(), " elements)");
  } else {
    COHORT_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "gather",
                 "only the root (rank ", root, ") passes output tensors");
  }
  return run(OpType::GATHER, "gather", outs, [&](WorkCohort& w) {
    at::Tensor src = input_of(w, in);
    at::Tensor flat;
    if (rank_ == root) {
      flat = at::empty({(int64_t)(nbytes(src) * size_)}, at::kByte);
      w.keep.push_back(flat);
      scatter_bytes_later(w, flat, outs);
    }
    ISSUE(w, cohort_igather(comm_, src.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr,
                            nbytes(src), COHORT_UINT8, root, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts)
{
  const at::Tensor& out = single(outputs, "scatter");
  int root = (int)opts.rootRank;
  if (rank_ == root) {
    COHORT_CHECK(inputs.size() == 1 && inputs[0].size() == (size_t)size_, "scatter",
                 "the root needs one list of ", size_, " input tensors");
    same_type(inputs[0], out, "scatter");
    for (auto& t : inputs[0])
      COHORT_CHECK(nbytes(t) == nbytes(out), "scatter", "input tensors must have the output's "
                   "size (", out.numel(), " elements)");
  } else {
    COHORT_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "scatter",
                 "only the root (rank ", root, ") passes input tensors");
  }
  return run(OpType::SCATTER, "scatter", outputs, [&](WorkCohort& w) {
    at::Tensor b = buffer_for(w, out, c10::nullopt, false);
    at::Tensor flat;
    if (rank_ == root) {
      flat = concat_bytes(inputs[0]);
      w.keep.push_back(flat);
    }
    ISSUE(w, cohort_iscatter(comm_, flat.defined() ? flat.data_ptr() : nullptr, b.data_ptr(),
                             nbytes(b), COHORT_UINT8, root, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts)
{
  const at::Tensor& out = single(outputs, "reduce_scatter");
  COHORT_CHECK(inputs.size() == 1 && inputs[0].size() == (size_t)size_, "reduce_scatter",
               "needs one list of ", size_, " input tensors (one per rank)");
  same_type(inputs[0], out, "reduce_scatter");
  for (auto& t : inputs[0])
    COHORT_CHECK(t.numel() == out.numel(), "reduce_scatter", "input tensors must have the "
                 "output's size (", out.numel(), " elements), one has ", t.numel());
  Reduction r = reduction(out.scalar_type(), opts.reduceOp, "reduce_scatter");
  return run(OpType::REDUCE_SCATTER, "reduce_scatter", outputs, [&](WorkCohort& w) {
    int64_t n = out.numel();
    at::Tensor flat = at::empty({n * size_}, out.options().dtype(r.stage ? *r.stage
                                                                         : out.scalar_type()));
    for (int i = 0; i < size_; i++)
      if (n) flat.narrow(0, i * n, n).copy_(inputs[0][i].reshape({-1}));
    w.keep.push_back(flat);
    at::Tensor b = buffer_for(w, out, r.stage, false);
    ISSUE(w, cohort_ireduce_scatter(comm_, flat.data_ptr(), b.data_ptr(), (size_t)(n * r.mult),
                                    r.dt, r.op, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts)
{
  const char* fn = "_reduce_scatter_base";
  check_tensor(input, fn);
  same_type({output}, input, fn);
  COHORT_CHECK(input.numel() == output.numel() * size_, fn, "the input holds ", input.numel(),
               " elements, not world size ", size_, " x the output's ", output.numel());
  Reduction r = reduction(output.scalar_type(), opts.reduceOp, fn);
  return run(OpType::_REDUCE_SCATTER_BASE, fn, {output}, [&](WorkCohort& w) {
    at::Tensor src = input_of(w, input, r.stage);
    at::Tensor b = buffer_for(w, output, r.stage, false);
    ISSUE(w, cohort_ireduce_scatter(comm_, src.data_ptr(), b.data_ptr(),
                                    (size_t)(b.numel() * r.mult), r.dt, r.op, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions&)
{
  const char* fn = "alltoall_base";
  check_tensor(input, fn);
  same_type({output}, input, fn);
  auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which,
                    std::vector<size_t>& c, std::vector<size_t>& d) {
    c.assign(size_, 0);
    d.assign(size_, 0);
    int64_t rows = t.dim() ? t.size(0) : 1;
    if (splits.empty()) {
      COHORT_CHECK(rows % size_ == 0, fn, "the ", which, " tensor's first dimension (", rows,
                   ") does not divide by world size ", size_, "; pass split sizes");
    } else {
      COHORT_CHECK(splits.size() == (size_t)size_, fn, which, " split sizes: ", splits.size(),
                   " entries for world size ", size_);
      int64_t sum = 0;
      for (int64_t s : splits) {
        COHORT_CHECK(s >= 0, fn, "negative ", which, " split size ", s);
        sum += s;
      }
      COHORT_CHECK(sum == rows, fn, which, " split sizes add up to ", sum, ", the tensor's "
                   "first dimension is ", rows);
    }
    size_t row = rows ? nbytes(t) / (size_t)rows : 0, off = 0;
    for (int r = 0; r < size_; r++) {
      c[r] = (size_t)(splits.empty() ? rows / size_ : splits[r]) * row;
      d[r] = off;
      off += c[r];
    }
  };
  std::vector<size_t> sc, sd, rc, rd;
  counts(input, inputSplits, "input", sc, sd);
  counts(output, outputSplits, "output", rc, rd);
  return run(OpType::ALLTOALL_BASE, fn, {output}, [&](WorkCohort& w) {
    at::Tensor src = input_of(w, input);
    at::Tensor b = buffer_for(w, output, c10::nullopt, false);
    ISSUE(w, cohort_ialltoallv(comm_, src.data_ptr(), sc.data(), sd.data(), b.data_ptr(),
                               rc.data(), rd.data(), COHORT_UINT8, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions&)
{
  const char* fn = "alltoall";
  COHORT_CHECK(outputs.size() == (size_t)size_ && inputs.size() == (size_t)size_, fn,
               "needs ", size_, " input and ", size_, " output tensors (one per rank)");
  same_type(inputs, inputs[0], fn);
  same_type(outputs, inputs[0], fn);
  return run(OpType::ALLTOALL, fn, outputs, [&](WorkCohort& w) {
    std::vector<size_t> sc(size_), sd(size_), rc(size_), rd(size_);
    size_t so = 0, ro = 0;
    for (int r = 0; r < size_; r++) {
      sc[r] = nbytes(inputs[r]);
      sd[r] = so;
      so += sc[r];
      rc[r] = nbytes(outputs[r]);
      rd[r] = ro;
      ro += rc[r];
    }
    at::Tensor src = concat_bytes(inputs);
    at::Tensor flat = at::empty({(int64_t)ro}, at::kByte);
    w.keep.push_back(src);
    w.keep.push_back(flat);
    scatter_bytes_later(w, flat, outputs);
    ISSUE(w, cohort_ialltoallv(comm_, src.data_ptr(), sc.data(), sd.data(), flat.data_ptr(),
                               rc.data(), rd.data(), COHORT_UINT8, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::barrier(const c10d::BarrierOptions&)
{
  return run(OpType::BARRIER, "barrier", {},
             [&](WorkCohort& w) { ISSUE(w, cohort_ibarrier(comm_, REQ)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::send(std::vector<at::Tensor>& tensors,
                                                        int dst, int tag)
{
  const at::Tensor& t = single(tensors, "send");
  return run(OpType::SEND, "send", tensors, [&](WorkCohort& w) {
    at::Tensor src = input_of(w, t);
    ISSUE(w, cohort_isend(comm_, src.data_ptr(), nbytes(src), COHORT_UINT8, dst, tag, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::recv(std::vector<at::Tensor>& tensors,
                                                        int src, int tag)
{
  const at::Tensor& t = single(tensors, "recv");
  return run(OpType::RECV, "recv", tensors, [&](WorkCohort& w) {
    at::Tensor b = buffer_for(w, t, c10::nullopt, false);
    ISSUE(w, cohort_irecv(comm_, b.data_ptr(), nbytes(b), COHORT_UINT8, src, tag, REQ));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCohort::recvAnysource(std::vector<at::Tensor>&, int)
{
  COHORT_CHECK(false, "recv", "a receive from any source is not supported: cohort matches "
               "messages per pair of ranks, in order; pass src");
}

void ProcessGroupCohort::monitoredBarrier(const c10d::BarrierOptions&, bool)
{
  COHORT_CHECK(false, "monitored_barrier", "not supported; use barrier(): when it times out "
               "(the process group's timeout) its error names the ranks that never joined");
}

void ProcessGroupCohort::setSequenceNumberForGroup()
{
  // every rank starts at 0 when the group is made, and counts the same operations
  std::lock_guard<std::mutex> lk(issue_mu_);
  sequenceNum_ = c10d::SequenceNum(0);
}

uint64_t ProcessGroupCohort::getSequenceNumberForGroup()
{
  std::lock_guard<std::mutex> lk(issue_mu_);
  return sequenceNum_ ? sequenceNum_->get() : 0;
}

void ProcessGroupCohort::nameNext(const std::string& name)
{
  std::lock_guard<std::mutex> lk(issue_mu_);
  cohort_status_t st = cohort_comm_name_next(comm_, name.c_str());
  TORCH_CHECK(st == COHORT_SUCCESS, "cohort: naming the next operation: ", cohort_message(st));
}

void ProcessGroupCohort::setCompression(const std::string& wire)
{
  cohort_dtype_t dt = wire == "fp16" ? COHORT_FLOAT16
                      : wire == "bf16" ? COHORT_BFLOAT16
                      : wire == "none" ? COHORT_FLOAT32 : (cohort_dtype_t)-1;
  TORCH_CHECK((int)dt >= 0, "cohort: wire compression '", wire, "': use none, fp16 or bf16");
  std::lock_guard<std::mutex> lk(issue_mu_);
  cohort_status_t st = cohort_comm_set_compression(comm_, dt);
  TORCH_CHECK(st == COHORT_SUCCESS, "cohort: set_compression: ", cohort_message(st));
}

std::pair<uint64_t, uint64_t> ProcessGroupCohort::fusionStats()
{
  uint64_t reqs = 0, batches = 0;
  cohort_comm_fusion_stats(comm_, &reqs, &batches);
  return {reqs, batches};
}

}  // namespace cohort_torch
