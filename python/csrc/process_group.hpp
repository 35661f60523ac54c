/* SPDX-License-Identifier: BSD-3-Clause */
// ProcessGroupCohort: PyTorch's c10d ProcessGroup over cohort's non-blocking C API.
//
// Every operation is issued as one or more cohort requests (cohort_i*) and returns at once with a
// WorkCohort. One watcher thread per process group waits for the requests in issue order (cohort
// runs a communicator's operations in that order) and completes each Work and its Future: the
// caller never blocks, and no thread is made per call. Tensors cohort cannot use as they are
// (non-contiguous, lists of tensors, int16 in a reduction) go through contiguous staging tensors,
// copied back by the watcher before the Work completes.
//
// The communicator is created through the c10d Store torch hands to the backend (an allgather
// over set/get), so every torch init method works, with torch's timeout as the communicator's
// own (cohort_comm_init_oob_timeout).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "cohort/cohort.h"

namespace cohort_torch {

class WorkCohort : public c10d::Work {
 public:
  WorkCohort(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs);
  ~WorkCohort() override;

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::vector<at::Tensor> result() override { return outputs_; }

  // Filled while the operation is issued (the issuing thread only).
  std::vector<cohort_request_t*> reqs;
  std::vector<at::Tensor> keep;        // inputs and staging buffers cohort reads or writes
  std::vector<std::function<void()>> post;   // copy staging results out (on success)
  const char* op_name;

  // The watcher: st and msg of the first failed request, or success.
  void complete(cohort_status_t st, const std::string& msg);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupCohort : public c10d::ProcessGroup {
 public:
  ProcessGroupCohort(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     double timeout_s);
  ~ProcessGroupCohort() override;

  const std::string getBackendName() const override { return "cohort"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  // Python-side extras (cohort.torch).
  void nameNext(const std::string& name);
  void setCompression(const std::string& wire);
  std::pair<uint64_t, uint64_t> fusionStats();
  cohort_comm_t* comm() const { return comm_; }

 private:
  using Issue = std::function<void(WorkCohort&)>;
  // Issues one operation: issue() makes its cohort calls (pushing each request on the Work);
  // a refused call throws with cohort's message; the Work goes to the watcher.
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, const char* name,
                                     std::vector<at::Tensor> outputs, const Issue& issue);
  void watch();
  std::string groupFailure(const std::string& mine);

  cohort_comm_t* comm_ = nullptr;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string key_prefix_;              // this group's keys in the store ("cohort/<n>/")
  bool failed_ = false;                 // the watcher: a failure was reported to the group
  std::mutex issue_mu_;                 // cohort: one thread at a time issues on a communicator
  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<c10::intrusive_ptr<WorkCohort>> queue_;
  bool stop_ = false;
  std::thread watcher_;
  uint64_t seq_ = 0;
};

}  // namespace cohort_torch
