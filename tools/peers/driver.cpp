// The peers driver: runs llama.cpp's CPU backend (one thread) in three modes and prints one
// JSON object on stdout. Built by tools/peers/build.py against the llama.cpp source inside
// the llama-cpp-python sdist; run natively or under QEMU with the insncount plugin.
//
//   driver decode MODEL.gguf --context C --tokens N [--seed S] [--batch B] [--state FILE]
//   driver prefill MODEL.gguf --tokens P [--batch B] [--seed S]
//   driver matvec --type T --k K --n N [--m M] --reps R [--seed S]
//     T: f16, bf16, q8_0, q4_0, iq4_nl, q3_k, q4_k, q6_k, f32
//
// Marks for the insncount plugin: mark(label) is the syscall lseek(-1, 0x696E73636E74, label),
// which the plugin records (counts so far, with the label) and the kernel refuses with EBADF.
// decode: mark(0) after the prompt is in the KV cache, mark(i+1) after decoded token i.
//   --state FILE: load the KV cache of the first C - 1 prompt tokens from FILE if it exists,
//   else compute it and save it there (so a native run can fill it for an emulated one).
// prefill: mark(0), one llama_decode of P tokens, mark(1).
// matvec: one warm-up product, mark(0), then R products with mark(r+1) after each.
// Errors: a message on stderr and exit status 1 (2 for bad command lines).

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "llama.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr off_t kMarkMagic = static_cast<off_t>(0x696E73636E74LL);

void mark(int label) {
    // The plugin sees the syscall's arguments before the kernel rejects the bad descriptor.
    (void)lseek(-1, kMarkMagic, label);
}

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// --name value options after the positional arguments.
struct Args {
    std::vector<std::string> positional;
    std::map<std::string, std::string> opts;

    bool has(const std::string& name) const { return opts.count(name) != 0; }

    std::string str(const std::string& name, const char* fallback = nullptr) const {
        auto it = opts.find(name);
        if (it != opts.end()) return it->second;
        if (fallback == nullptr) throw UsageError("missing option --" + name);
        return fallback;
    }

    long long integer(const std::string& name, long long fallback, long long lo, long long hi,
                      bool required = false) const {
        auto it = opts.find(name);
        if (it == opts.end()) {
            if (required) throw UsageError("missing option --" + name);
            return fallback;
        }
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(it->second.c_str(), &end, 10);
        if (errno != 0 || end == it->second.c_str() || *end != '\0' || v < lo || v > hi) {
            throw UsageError("--" + name + " must be an integer in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "], not '" + it->second + "'");
        }
        return v;
    }
};

Args parse_args(int argc, char** argv, int first, const std::vector<std::string>& known) {
    Args a;
    for (int i = first; i < argc; ++i) {
        std::string s = argv[i];
        if (s.rfind("--", 0) == 0) {
            std::string name = s.substr(2);
            bool ok = false;
            for (const auto& k : known) ok = ok || k == name;
            if (!ok) throw UsageError("unknown option " + s);
            if (i + 1 >= argc) throw UsageError("option " + s + " needs a value");
            a.opts[name] = argv[++i];
        } else {
            a.positional.push_back(s);
        }
    }
    return a;
}

// What llama.cpp resolved Flash Attention to (its default "auto" enables it when the CPU
// backend supports it); read from its log, which has no API for it.
std::string g_flash_attn = "unknown";

void quiet_log(enum ggml_log_level level, const char* text, void*) {
    if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
    if (std::strstr(text, "Flash Attention enabled") != nullptr) g_flash_attn = "enabled";
    if (std::strstr(text, "Flash Attention not supported") != nullptr) g_flash_attn = "disabled";
}

std::string json_ints(const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

int argmax(const float* logits, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i) {
        if (logits[i] > logits[best]) best = i;
    }
    return best;
}

struct Model {
    llama_model* model = nullptr;
    llama_context* ctx = nullptr;
    int n_vocab = 0;
    int n_layer = 0;

    Model(const std::string& path, uint32_t n_ctx, uint32_t n_batch, uint32_t n_ubatch) {
        llama_model_params mp = llama_model_default_params();
        model = llama_model_load_from_file(path.c_str(), mp);
        if (model == nullptr) throw std::runtime_error("cannot load model " + path);
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = n_ctx;
        cp.n_batch = n_batch;
        cp.n_ubatch = n_ubatch;
        cp.n_seq_max = 1;
        cp.n_threads = 1;
        cp.n_threads_batch = 1;
        cp.no_perf = true;
        ctx = llama_init_from_model(model, cp);
        if (ctx == nullptr) throw std::runtime_error("cannot create a context for " + path);
        n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
        n_layer = llama_model_n_layer(model);
    }
    ~Model() {
        if (ctx) llama_free(ctx);
        if (model) llama_model_free(model);
    }
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    void decode(std::vector<llama_token>& toks, const char* what) {
        int rc = llama_decode(ctx, llama_batch_get_one(toks.data(), (int32_t)toks.size()));
        if (rc != 0) throw std::runtime_error(std::string("llama_decode failed (") + what + "): " +
                                              std::to_string(rc));
    }
    int last_argmax() {
        const float* logits = llama_get_logits_ith(ctx, -1);
        if (logits == nullptr) throw std::runtime_error("no logits after llama_decode");
        return argmax(logits, n_vocab);
    }
};

std::vector<llama_token> random_tokens(uint64_t seed, int n, int n_vocab) {
    std::mt19937_64 gen(seed);
    std::uniform_int_distribution<int> dist(0, n_vocab - 1);
    std::vector<llama_token> t(n);
    for (auto& x : t) x = dist(gen);
    return t;
}

int cmd_decode(const Args& a) {
    if (a.positional.size() != 1) throw UsageError("decode takes one MODEL.gguf");
    int C = (int)a.integer("context", 0, 1, 1 << 20, true);
    int N = (int)a.integer("tokens", 0, 1, 1 << 16, true);
    uint64_t seed = (uint64_t)a.integer("seed", 0, 0, INT64_MAX);
    int B = (int)a.integer("batch", 512, 1, 1 << 16);
    std::string state = a.str("state", "");

    Model m(a.positional[0], (uint32_t)(C + N + 8), (uint32_t)B, (uint32_t)B);
    std::vector<llama_token> prompt = random_tokens(seed, C, m.n_vocab);
    // The state file holds the KV cache of the first C - 1 prompt tokens (a loaded state has
    // no logits); the last prompt token is always decoded here, giving the first logits.
    std::vector<llama_token> head(prompt.begin(), prompt.end() - 1);
    bool loaded = false;
    if (!state.empty() && access(state.c_str(), R_OK) == 0) {
        std::vector<llama_token> saved(C);
        size_t n_saved = 0;
        if (!llama_state_load_file(m.ctx, state.c_str(), saved.data(), saved.size(), &n_saved)) {
            throw std::runtime_error("cannot load the state file " + state);
        }
        saved.resize(n_saved);
        if (saved != head) {
            throw std::runtime_error("state file " + state + " holds another prompt (" +
                                     std::to_string(n_saved) + " tokens; expected the first " +
                                     std::to_string(C - 1) + " of seed " + std::to_string(seed) +
                                     ")");
        }
        loaded = true;
    }
    if (!loaded) {
        for (int i = 0; i < C - 1; i += B) {
            std::vector<llama_token> chunk(head.begin() + i, head.begin() + std::min(C - 1, i + B));
            m.decode(chunk, "prompt");
        }
        if (!state.empty() &&
            !llama_state_save_file(m.ctx, state.c_str(), head.data(), head.size())) {
            throw std::runtime_error("cannot save the state file " + state);
        }
    }
    std::vector<llama_token> last{prompt.back()};
    m.decode(last, "last prompt token");
    int next = m.last_argmax();
    std::vector<int> out;
    mark(0);
    for (int i = 0; i < N; ++i) {
        std::vector<llama_token> one{next};
        m.decode(one, "token");
        next = m.last_argmax();
        out.push_back(next);
        mark(i + 1);
    }
    std::printf("{\"mode\": \"decode\", \"tokens\": %s, \"n_vocab\": %d, \"n_layer\": %d, "
                "\"context\": %d, \"state\": \"%s\", \"flash_attn\": \"%s\"}\n",
                json_ints(out).c_str(), m.n_vocab, m.n_layer, C,
                state.empty() ? "none" : (loaded ? "loaded" : "saved"), g_flash_attn.c_str());
    return 0;
}

int cmd_prefill(const Args& a) {
    if (a.positional.size() != 1) throw UsageError("prefill takes one MODEL.gguf");
    int P = (int)a.integer("tokens", 0, 1, 1 << 20, true);
    int B = (int)a.integer("batch", 512, 1, 1 << 16);
    uint64_t seed = (uint64_t)a.integer("seed", 0, 0, INT64_MAX);
    Model m(a.positional[0], (uint32_t)(P + 8), (uint32_t)P, (uint32_t)std::min(P, B));
    std::vector<llama_token> prompt = random_tokens(seed, P, m.n_vocab);
    mark(0);
    m.decode(prompt, "prompt");
    mark(1);
    int next = m.last_argmax();
    std::printf("{\"mode\": \"prefill\", \"tokens\": %d, \"batch\": %d, \"next\": %d, "
                "\"n_vocab\": %d, \"n_layer\": %d, \"flash_attn\": \"%s\"}\n",
                P, std::min(P, B), next, m.n_vocab, m.n_layer, g_flash_attn.c_str());
    return 0;
}

const std::map<std::string, ggml_type>& matvec_types() {
    static const std::map<std::string, ggml_type> t = {
        {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16},     {"q8_0", GGML_TYPE_Q8_0},
        {"q4_0", GGML_TYPE_Q4_0}, {"iq4_nl", GGML_TYPE_IQ4_NL}, {"q3_k", GGML_TYPE_Q3_K},
        {"q4_k", GGML_TYPE_Q4_K}, {"q6_k", GGML_TYPE_Q6_K},     {"f32", GGML_TYPE_F32},
    };
    return t;
}

// The weight buffer type llama.cpp's loader would pick for this product: the first of the CPU
// device's extra buffer types (weight repacking) that supports it, else the plain CPU type.
ggml_backend_buffer_type_t pick_weight_buft(ggml_backend_dev_t dev, ggml_tensor* w,
                                            ggml_tensor* op) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(
        reg, "ggml_backend_dev_get_extra_bufts");
    if (get_extra != nullptr) {
        for (ggml_backend_buffer_type_t* b = get_extra(dev); b && *b; ++b) {
            ggml_backend_buffer_t probe = ggml_backend_buft_alloc_buffer(*b, 0);
            w->buffer = probe;
            bool ok = ggml_backend_dev_supports_op(dev, op);
            w->buffer = nullptr;
            ggml_backend_buffer_free(probe);
            if (ok) return *b;
        }
    }
    return ggml_backend_cpu_buffer_type();
}

int cmd_matvec(const Args& a) {
    if (!a.positional.empty()) throw UsageError("matvec takes no positional arguments");
    std::string tname = a.str("type");
    auto it = matvec_types().find(tname);
    if (it == matvec_types().end()) {
        throw UsageError("--type must be one of f16, bf16, q8_0, q4_0, iq4_nl, q3_k, q4_k, q6_k, f32; not '" +
                         tname + "'");
    }
    ggml_type type = it->second;
    int64_t K = a.integer("k", 0, 1, 1 << 20, true);
    int64_t N = a.integer("n", 0, 1, 1 << 22, true);
    int64_t M = a.integer("m", 1, 1, 1 << 16);
    int R = (int)a.integer("reps", 0, 1, 1 << 20, true);
    uint64_t seed = (uint64_t)a.integer("seed", 0, 0, INT64_MAX);
    if (K % ggml_blck_size(type) != 0) {
        throw UsageError("--k must be a multiple of " + std::to_string(ggml_blck_size(type)) +
                         " for " + tname + ", not " + std::to_string(K));
    }

    ggml_backend_t be = ggml_backend_cpu_init();
    if (be == nullptr) throw std::runtime_error("cannot start the CPU backend");
    ggml_backend_cpu_set_n_threads(be, 1);
    ggml_backend_dev_t dev = ggml_backend_get_device(be);

    ggml_init_params wp = {ggml_tensor_overhead() * 4, nullptr, true};
    ggml_context* ctx_w = ggml_init(wp);
    ggml_init_params cp = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), nullptr, true};
    ggml_context* ctx_c = ggml_init(cp);
    ggml_tensor* w = ggml_new_tensor_2d(ctx_w, type, K, N);
    ggml_tensor* x = ggml_new_tensor_2d(ctx_c, GGML_TYPE_F32, K, M);
    ggml_tensor* y = ggml_mul_mat(ctx_c, w, x);
    ggml_cgraph* gf = ggml_new_graph(ctx_c);
    ggml_build_forward_expand(gf, y);

    ggml_backend_buffer_type_t wbuft = pick_weight_buft(dev, w, y);
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(ctx_w, wbuft);
    if (wbuf == nullptr) throw std::runtime_error("cannot allocate the weight");
    ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
    if (!ggml_gallocr_alloc_graph(galloc, gf)) throw std::runtime_error("cannot allocate the graph");

    // Weights: up to 64 distinct rows of N(0, 0.02) values in the type (ggml's own
    // quantiser makes valid blocks), repeated over the N rows; the counts of the product do
    // not depend on the values.
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    int64_t distinct = std::min<int64_t>(N, 64);
    std::vector<float> src(distinct * K);
    for (auto& v : src) v = dist(gen);
    size_t row_bytes = ggml_row_size(type, K);
    std::vector<uint8_t> rows(distinct * row_bytes);
    ggml_quantize_chunk(type, src.data(), rows.data(), 0, distinct, K, nullptr);
    std::vector<uint8_t> wdata(N * row_bytes);
    for (int64_t r = 0; r < N; ++r) {
        std::memcpy(wdata.data() + r * row_bytes, rows.data() + (r % distinct) * row_bytes,
                    row_bytes);
    }
    ggml_backend_tensor_set(w, wdata.data(), 0, wdata.size());
    std::vector<float> xdata(K * M);
    std::normal_distribution<float> xdist(0.0f, 1.0f);
    for (auto& v : xdata) v = xdist(gen);
    ggml_backend_tensor_set(x, xdata.data(), 0, xdata.size() * sizeof(float));

    if (ggml_backend_graph_compute(be, gf) != GGML_STATUS_SUCCESS) {
        throw std::runtime_error("graph compute failed");
    }
    mark(0);
    for (int r = 0; r < R; ++r) {
        ggml_backend_graph_compute(be, gf);
        mark(r + 1);
    }
    std::vector<float> ydata(N * M);
    ggml_backend_tensor_get(y, ydata.data(), 0, ydata.size() * sizeof(float));
    double sum = 0;
    for (float v : ydata) sum += v;
    std::printf("{\"mode\": \"matvec\", \"type\": \"%s\", \"k\": %lld, \"n\": %lld, \"m\": %lld, "
                "\"reps\": %d, \"weight_buffer\": \"%s\", \"weight_bytes\": %zu, "
                "\"checksum\": %.6g}\n",
                tname.c_str(), (long long)K, (long long)N, (long long)M, R,
                ggml_backend_buft_name(wbuft), wdata.size(), sum);
    ggml_gallocr_free(galloc);
    ggml_backend_buffer_free(wbuf);
    ggml_free(ctx_c);
    ggml_free(ctx_w);
    ggml_backend_free(be);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (argc < 2) throw UsageError("usage: driver decode|prefill|matvec ...");
        std::string mode = argv[1];
        llama_log_set(quiet_log, nullptr);
        ggml_log_set(quiet_log, nullptr);
        if (mode == "decode" || mode == "prefill") {
            llama_backend_init();
            Args a = parse_args(argc, argv, 2, {"context", "tokens", "seed", "batch", "state"});
            if (mode == "prefill" && (a.has("context") || a.has("state"))) {
                throw UsageError("prefill takes --tokens, --batch, --seed");
            }
            int rc = mode == "decode" ? cmd_decode(a) : cmd_prefill(a);
            llama_backend_free();
            return rc;
        }
        if (mode == "matvec") {
            ggml_cpu_init();
            return cmd_matvec(parse_args(argc, argv, 2, {"type", "k", "n", "m", "reps", "seed"}));
        }
        throw UsageError("unknown mode '" + mode + "' (decode, prefill or matvec)");
    } catch (const UsageError& e) {
        std::fprintf(stderr, "driver: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "driver: %s\n", e.what());
        return 1;
    }
}
