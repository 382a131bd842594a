// rvv_ops::build_info and rvv_ops::set_variant: what was built, what the CPU offers, and
// which kernel variant runs.
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "ops.h"
#include "rvvk/rvvk.h"

namespace rvv_ops {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_bool(bool b) { return b ? "true" : "false"; }

// "a,b,c" -> ["a", "b", "c"], keeping those `keep` accepts.
template <class Keep>
std::string json_list(const std::string& csv, Keep keep) {
  std::string out = "[";
  std::size_t start = 0;
  while (start <= csv.size()) {
    std::size_t end = csv.find(',', start);
    if (end == std::string::npos) end = csv.size();
    const std::string item = csv.substr(start, end - start);
    if (!item.empty() && keep(item)) {
      if (out.size() > 1) out += ", ";
      out += json_string(item);
    }
    start = end + 1;
  }
  return out + "]";
}

}  // namespace

std::string build_info() {
  const rvvk::CpuInfo cpu = rvvk::cpu_info();
  const std::string compiled = rvvk::compiled_variants();
  const auto any = [](const std::string&) { return true; };
  const auto supported = [](const std::string& v) { return rvvk::variant_supported(v.c_str()); };
  std::ostringstream s;
  s << "{\"torch_version\": " << json_string(TORCH_VERSION)
    << ", \"compiled_variants\": " << json_list(compiled, any)
    << ", \"supported_variants\": " << json_list(compiled, supported)
    << ", \"active_variant\": " << json_string(rvvk::active_variant())
    << ", \"variant_error\": " << json_string(rvvk::variant_error())
    << ", \"decode_kv_heads_per_task\": " << rvvk::kDecodeKvHeadsPerTask
    << ", \"cpu\": {\"has_v\": " << json_bool(cpu.has_v) << ", \"vlen\": " << cpu.vlen_bits
    << ", \"zvfh\": " << json_bool(cpu.zvfh) << ", \"zvfhmin\": " << json_bool(cpu.zvfhmin)
    << ", \"zvfbfmin\": " << json_bool(cpu.zvfbfmin) << ", \"avx2\": " << json_bool(cpu.avx2)
    << ", \"avx512\": " << json_bool(cpu.avx512)
    << ", \"avx512_bf16\": " << json_bool(cpu.avx512_bf16)
    << ", \"amx_bf16\": " << json_bool(cpu.amx_bf16) << ", \"source\": " << json_string(cpu.source) << "}}";
  return s.str();
}

void set_variant(const std::string& name) {
  TORCH_CHECK_VALUE(rvvk::set_variant(name.c_str()), "set_variant: variant '", name,
                    "' cannot be used here; compiled: ", rvvk::compiled_variants(),
                    " (a variant also needs the CPU extensions it was built for)");
}

}  // namespace rvv_ops
