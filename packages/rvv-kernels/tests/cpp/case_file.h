// The attention case files the decode and extend drivers run: written by the
// cross-layer conformance suite (tests/conformance/kernel_cases.py, whose docstring
// describes the format) into the directory named by RVVK_CASES_DIR. A file holds
// one case's scalar arguments, its input buffers as the kernel reads them, the
// expected output and the error allowed on each element; the drivers only run
// the kernel and compare. A missing directory, group or file is a failure.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness.h"
#include "reference.h"
#include "rvvk/rvvk.h"

namespace rvvk_test {

struct Section {
  std::string type;  // f64 f32 bf16 f16 e4m3 e5m2 i8 i32 i64 text
  std::uint64_t count = 0;
  std::vector<unsigned char> bytes;  // its own allocation: the kernels read it in place
};

class CaseFile {
 public:
  std::string path;
  std::map<std::string, Section> sections;

  // Reads one case file; throws std::runtime_error naming the file on a bad one.
  static CaseFile load(const std::string& path) {
    CaseFile f;
    f.path = path;
    std::ifstream in(path, std::ios::binary);
    char magic[8];
    std::uint32_t head[2];
    if (!in.read(magic, 8) || std::memcmp(magic, "RVVKCASE", 8) != 0 ||
        !in.read(reinterpret_cast<char*>(head), sizeof head) || head[0] != 1)
      throw std::runtime_error(path + ": not a version 1 case file");
    for (std::uint32_t i = 0; i < head[1]; ++i) {
      char name[33] = {}, type[9] = {};
      std::uint64_t count = 0;
      if (!in.read(name, 32) || !in.read(type, 8) ||
          !in.read(reinterpret_cast<char*>(&count), 8))
        throw std::runtime_error(path + ": truncated section header");
      Section s{type, count, {}};
      s.bytes.resize(count * elem_size(s.type, path));
      char pad[8];
      if (!in.read(reinterpret_cast<char*>(s.bytes.data()),
                   static_cast<std::streamsize>(s.bytes.size())) ||
          !in.read(pad, static_cast<std::streamsize>((8 - s.bytes.size() % 8) % 8)))
        throw std::runtime_error(path + ": truncated section " + name);
      if (!f.sections.emplace(name, std::move(s)).second)
        throw std::runtime_error(path + ": section " + name + " twice");
    }
    return f;
  }

  bool has(const std::string& name) const { return sections.count(name) != 0; }

  Section& at(const std::string& name) {
    auto it = sections.find(name);
    if (it == sections.end()) throw std::runtime_error(path + ": no section " + name);
    return it->second;
  }

  // A section of `type` (any type if empty), checked.
  Section& typed(const std::string& name, const std::string& type) {
    Section& s = at(name);
    if (!type.empty() && s.type != type)
      throw std::runtime_error(path + ": section " + name + " is " + s.type + ", not " + type);
    return s;
  }

  template <class T>
  T* ptr(const std::string& name, const std::string& type) {
    return static_cast<T*>(static_cast<void*>(typed(name, type).bytes.data()));
  }
  void* data(const std::string& name) { return at(name).bytes.data(); }
  // The strides of buffer `name` (its sections name_stride_row / name_stride_head).
  void strides(const std::string& name, std::int64_t& row, std::int64_t& head) {
    row = i64(name + "_stride_row");
    head = i64(name + "_stride_head");
  }
  // Buffer `name` with its strides.
  void* strided(const std::string& name, std::int64_t& row, std::int64_t& head) {
    strides(name, row, head);
    return data(name);
  }
  std::vector<std::int64_t> i64s(const std::string& name) {
    const Section& s = typed(name, "i64");
    std::vector<std::int64_t> v(s.count);
    std::memcpy(v.data(), s.bytes.data(), s.bytes.size());
    return v;
  }
  std::int64_t i64(const std::string& name) { return scalar<std::int64_t>(name, "i64"); }
  float f32(const std::string& name) { return scalar<float>(name, "f32"); }
  std::string text(const std::string& name) {
    const Section& s = typed(name, "text");
    return std::string(s.bytes.begin(), s.bytes.end());
  }
  // The rvvk::DType of an activation or cache buffer (a text section names the
  // dtype of a buffer the case does not store, e.g. the output's).
  rvvk::DType dtype(const std::string& name) {
    const Section& s = at(name);
    const std::string t = s.type == "text" ? text(name) : s.type;
    for (int i = 0; i < ref::kDTypeCount; ++i)
      if (t == ref::kDTypeNames[i]) return static_cast<rvvk::DType>(i);
    throw std::runtime_error(path + ": " + name + " has no kernel dtype");
  }

 private:
  static std::size_t elem_size(const std::string& type, const std::string& path) {
    static const std::map<std::string, std::size_t> sizes = {
        {"f64", 8}, {"f32", 4}, {"bf16", 2}, {"f16", 2}, {"e4m3", 1},
        {"e5m2", 1}, {"i8", 1}, {"i32", 4}, {"i64", 8}, {"text", 1}};
    auto it = sizes.find(type);
    if (it == sizes.end()) throw std::runtime_error(path + ": unknown section type " + type);
    return it->second;
  }
  template <class T>
  T scalar(const std::string& name, const std::string& type) {
    const Section& s = typed(name, type);
    if (s.count != 1) throw std::runtime_error(path + ": " + name + " is not a scalar");
    T v;
    std::memcpy(&v, s.bytes.data(), sizeof v);
    return v;
  }
};

// The KV cache of a case: k_cache / v_cache, their strides and scales, the table.
inline rvvk::KvCache read_cache(CaseFile& f) {
  rvvk::KvCache c;
  c.dtype = f.dtype("k_cache");
  c.k = f.strided("k_cache", c.k_stride_t, c.k_stride_h);
  c.v = f.strided("v_cache", c.v_stride_t, c.v_stride_h);
  c.k_scale = f.f32("k_scale");
  c.v_scale = f.f32("v_scale");
  if (f.has("k_scales")) {
    c.k_scales = f.ptr<const float>("k_scales", "f32");
    c.v_scales = f.ptr<const float>("v_scales", "f32");
    c.scales_stride = f.i64("scales_stride");
  }
  c.req_to_token_int64 = f.at("req_to_token").type == "i64";
  c.req_to_token = f.ptr<const void>("req_to_token", c.req_to_token_int64 ? "i64" : "i32");
  c.req_to_token_stride = f.i64("req_to_token_stride");
  return c;
}

// The arguments decode and extend share: shapes, cache, requests, score features.
template <class Args>
void read_common_args(Args& a, CaseFile& f) {
  a.batch = f.i64("batch");
  a.num_heads = f.i64("num_heads");
  a.num_kv_heads = f.i64("num_kv_heads");
  a.head_dim = f.i64("head_dim");
  a.head_dim_v = f.i64("head_dim_v");
  a.cache = read_cache(f);
  a.req_pool_indices = f.ptr<const std::int64_t>("req_pool_indices", "i64");
  a.seq_lens = f.ptr<const std::int64_t>("seq_lens", "i64");
  a.sm_scale = f.f32("sm_scale");
  a.logit_cap = f.f32("logit_cap");
  a.window = f.i64("window");
  a.sinks = f.has("sinks") ? f.ptr<const float>("sinks", "f32") : nullptr;
}

// An output buffer of the case's o_dtype, as long as `expected`, all NaN (a
// NaN in `expected` marks an element the kernel must leave as it is).
inline ref::Buffer nan_output(CaseFile& f) {
  ref::Buffer o(f.dtype("o_dtype"), f.at("expected").count);
  std::memset(o.data(), 0xff, o.bytes.size());  // all-ones: NaN in f32, bf16 and f16
  return o;
}

// Compares output o with the case's expected values: |got - expected| <=
// tolerance and not NaN, or still NaN where expected is NaN. One failure per
// run of a case: how many elements differ, the first with its (row, head, i)
// from the output strides, and the case's parameters.
inline void check_output(Context& ctx, CaseFile& f, const ref::Buffer& o, std::int64_t stride_row,
                         std::int64_t stride_head, const std::string& run) {
  const float* want = f.ptr<const float>("expected", "f32");
  const float* tol = f.ptr<const float>("tolerance", "f32");
  std::size_t bad = 0, first = 0;
  double worst = 0;
  for (std::size_t i = 0; i < o.size(); ++i) {
    const double got = o.get(i), w = want[i];
    const bool ok = std::isnan(w) ? std::isnan(got) : !std::isnan(got) && std::fabs(got - w) <= tol[i];
    if (!ok) {
      if (bad++ == 0) first = i;
      if (!std::isnan(w)) worst = std::max(worst, std::isnan(got) ? INFINITY : std::fabs(got - w));
    }
  }
  if (bad == 0) return;
  const auto i = static_cast<std::int64_t>(first);
  const std::string where = fmt("row %lld head %lld i %lld", (long long)(i / stride_row),
                                (long long)(i % stride_row / stride_head),
                                (long long)(i % stride_row % stride_head));
  ctx.fail(__FILE__, __LINE__,
           fmt("%s [%s]%s%s: %zu of %zu elements wrong; first at %s: got %.8g want %.8g +- %.3g "
               "(max error %.3g)",
               std::filesystem::path(f.path).filename().c_str(), f.text("name").c_str(),
               run.empty() ? "" : " ", run.c_str(), bad, o.size(), where.c_str(), o.get(first),
               static_cast<double>(want[first]), static_cast<double>(tol[first]), worst));
}

// The directory of case files (RVVK_CASES_DIR); throws if unset or missing.
inline std::filesystem::path cases_dir() {
  const char* dir = std::getenv("RVVK_CASES_DIR");
  if (dir == nullptr || *dir == '\0' || !std::filesystem::is_directory(dir))
    throw std::runtime_error(
        std::string("RVVK_CASES_DIR ") + (dir ? fmt("(%s) is not a directory", dir) : "is not set") +
        ": write the attention cases with `PYTHONPATH=tests python -m conformance.kernel_cases "
        "--out DIR` (tools/kernels_tests.py does) and set RVVK_CASES_DIR=DIR");
  return dir;
}

// The group -> file count index the generator writes (cases.txt: "group count" lines).
inline std::map<std::string, std::size_t> case_index() {
  const std::filesystem::path index = cases_dir() / "cases.txt";
  std::ifstream in(index);
  if (!in) throw std::runtime_error(index.string() + ": missing (an incomplete case directory)");
  std::map<std::string, std::size_t> groups;
  std::string group;
  std::size_t n;
  while (in >> group >> n) groups[group] = n;
  return groups;
}

// Runs `run(ctx, file)` on every case file of `group`, in name order. Fails if
// the group has no file or not as many as the index lists, and on a bad file.
template <class Run>
void run_case_group(Context& ctx, const std::string& group, Run run) {
  try {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(cases_dir())) {
      const std::string name = e.path().filename().string();
      if (name.rfind(group + "-", 0) == 0 && e.path().extension() == ".case")
        files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    const auto index = case_index();
    const auto it = index.find(group);
    const std::size_t listed = it == index.end() ? 0 : it->second;
    CHECK_MSG(!files.empty() && files.size() == listed,
              "%s: %zu case files in %s, the index lists %zu", group.c_str(), files.size(),
              cases_dir().c_str(), listed);
    for (const std::string& path : files) {
      CaseFile f = CaseFile::load(path);
      run(ctx, f);
    }
  } catch (const std::exception& e) {
    CHECK_MSG(false, "%s: %s", group.c_str(), e.what());
  }
}

using CaseRun = void (*)(Context&, CaseFile&);

// Registers one test per case group of the index whose name starts with
// `prefix` (the group is the test's name), running `run` on each of its files;
// without a readable index, or with no such group, one test `<prefix>cases`
// that fails saying why. Runs at static initialisation, from the drivers.
struct RegisterCaseGroups {
  RegisterCaseGroups(const std::string& prefix, CaseRun run) {
    std::vector<std::string> groups;
    std::string error;
    try {
      for (const auto& entry : case_index())
        if (entry.first.rfind(prefix, 0) == 0) groups.push_back(entry.first);
      if (groups.empty())
        error = fmt("%s/cases.txt lists no %s* group", cases_dir().c_str(), prefix.c_str());
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!error.empty()) {
      registry().emplace_back(prefix + "cases",
                              [error](Context& ctx) { CHECK_MSG(false, "%s", error.c_str()); });
      return;
    }
    for (const std::string& group : groups)
      registry().emplace_back(group, [group, run](Context& ctx) { run_case_group(ctx, group, run); });
  }
};

}  // namespace rvvk_test
