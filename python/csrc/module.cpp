/* SPDX-License-Identifier: BSD-3-Clause */
// cohort.torch._C: the process group class for Python (python/cohort/torch/_backend.py makes
// and registers it).
#include <torch/python.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_C, m)
{
  // the base class must be known to pybind11 before ours derives from it
  py::module::import("torch.distributed");
  py::class_<cohort_torch::ProcessGroupCohort, c10d::ProcessGroup,
             c10::intrusive_ptr<cohort_torch::ProcessGroupCohort>>(m, "ProcessGroupCohort")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       double timeout_s) {
             return c10::make_intrusive<cohort_torch::ProcessGroupCohort>(store, rank, size,
                                                                          timeout_s);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s"),
           py::call_guard<py::gil_scoped_release>())
      .def("_name_next", &cohort_torch::ProcessGroupCohort::nameNext, py::arg("name"),
           py::call_guard<py::gil_scoped_release>())
      .def("_set_compression", &cohort_torch::ProcessGroupCohort::setCompression,
           py::arg("wire"), py::call_guard<py::gil_scoped_release>())
      .def("_fusion_stats", &cohort_torch::ProcessGroupCohort::fusionStats);
  m.def("version", [] { return std::string(cohort_version()); });
}
