// tripath._tripath: the nanobind binding of the public API (include/tripath/tripath.h).
//
// Arrays arrive as nb::ndarray (DLPack, or the buffer protocol for read-only NumPy arrays), so the
// same entry points take NumPy arrays and torch / CuPy tensors on CPU or CUDA; convert.h turns
// them into tripath::TensorView and leaves the checks to the library. CUDA work runs on the
// stream handle passed in (0: the default stream).
//
// tripath::Error becomes tripath.Error (a ValueError) and tripath::OutOfBlocksError becomes
// tripath.OutOfBlocksError (a tripath.Error and a RuntimeError), message intact. Every call that
// computes releases the GIL once its arguments are converted.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "convert.h"
#include "tripath/tripath.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tripath::python {
namespace {

PyObject* g_error = nullptr;          // tripath.Error
PyObject* g_out_of_blocks = nullptr;  // tripath.OutOfBlocksError

// ---- helpers shared by the attention entry points ----

// A CUDA stream given from Python as its handle (an int, e.g. torch's Stream.cuda_stream);
// 0 is the default stream.
void* stream_arg(uintptr_t stream) { return reinterpret_cast<void*>(stream); }

AttentionParams make_params(const TensorView& q, const KvCacheConfig& cache, float scale,
                            int window_left, float softcap, bool has_sinks,
                            const std::optional<AttentionParams>& given) {
  if (given) {
    AttentionParams p = *given;
    p.has_sinks = has_sinks;
    return p;
  }
  if (q.ndim != 3) {
    throw_arg_error("q", "shape " + q.shape_text(), "[num_tokens, num_q_heads, head_dim]");
  }
  AttentionParams p;
  p.num_q_heads = static_cast<int>(q.shape[1]);
  p.num_kv_heads = cache.num_kv_heads;
  p.head_dim = static_cast<int>(q.shape[2]);
  p.scale = scale;
  p.window_left = window_left;
  p.softcap = softcap;
  p.has_sinks = has_sinks;
  return p;
}

AttentionInputs make_inputs(const KvCacheConfig& cache, const InArray& q,
                            const std::optional<InArray>& k, const std::optional<InArray>& v,
                            const OutArray& k_cache, const OutArray& v_cache, const OutArray& out,
                            const std::optional<OutArray>& lse,
                            const std::optional<InArray>& sinks) {
  AttentionInputs in;
  in.q = as_view(q, "q");
  if (k.has_value() != v.has_value()) {
    throw_arg_error(k ? "v" : "k", "None", "k and v given together (or both None: no write)");
  }
  if (k) {
    in.k = as_view(*k, "k");
    in.v = as_view(*v, "v");
  }
  in.cache.config = cache;
  in.cache.k = as_cache_view(k_cache, "k_cache", cache.dtype);
  in.cache.v = as_cache_view(v_cache, "v_cache", cache.dtype);
  in.out = as_view(out, "out");
  if (lse) in.lse = as_view(*lse, "lse");
  if (sinks) in.sinks = as_view(*sinks, "sinks");
  return in;
}

// A backend given as an object (reused) or a name ("auto" resolved; created anew).
template <typename Backend>
struct BackendRef {
  Backend* backend = nullptr;
  std::unique_ptr<Backend> owned;
};

template <typename Backend>
BackendRef<Backend> backend_arg(nb::handle h) {
  constexpr bool kMla = std::is_same_v<Backend, MlaBackend>;
  BackendRef<Backend> ref;
  if (nb::isinstance<Backend>(h)) {
    ref.backend = nb::cast<Backend*>(h);
  } else if (nb::isinstance<nb::str>(h)) {
    const std::string name = resolve_backend(nb::cast<std::string>(h), kMla);
    if constexpr (kMla) {
      ref.owned = create_mla_backend(name);
    } else {
      ref.owned = create_attention_backend(name);
    }
    ref.backend = ref.owned.get();
  } else {
    throw Error("invalid argument 'backend': got " + nb::cast<std::string>(nb::str(h.type())) +
                (kMla ? ", expected an MLA backend name or a tripath.MlaBackend"
                      : ", expected a backend name or a tripath.AttentionBackend"));
  }
  return ref;
}

void run_attention_with(AttentionBackend& backend, const StepPlan& plan, const KvCacheConfig& cache,
                        const InArray& q, const std::optional<InArray>& k,
                        const std::optional<InArray>& v, const OutArray& k_cache,
                        const OutArray& v_cache, const OutArray& out,
                        const std::optional<OutArray>& lse, const std::optional<InArray>& sinks,
                        float scale, int window_left, float softcap,
                        const std::optional<AttentionParams>& params, bool write_cache,
                        bool prepare, uintptr_t stream) {
  const std::optional<InArray> none;
  AttentionInputs in = make_inputs(cache, q, write_cache ? k : none, write_cache ? v : none,
                                   k_cache, v_cache, out, lse, sinks);
  const AttentionParams p =
      make_params(in.q, cache, scale, window_left, softcap, in.sinks.defined(), params);
  in.stream = stream_arg(stream);
  nb::gil_scoped_release release;
  if (prepare) backend.prepare(plan, p, in.stream);
  backend.run(plan, p, in);
}

int mla_num_heads(int num_heads, const std::optional<TensorView>& a,
                  const std::optional<TensorView>& b) {
  if (num_heads > 0) return num_heads;
  for (const auto* t : {&a, &b}) {
    if (*t && (*t)->ndim == 3) return static_cast<int>((*t)->shape[1]);
  }
  throw Error(
      "invalid argument 'num_heads': got 0 and no 3-d q_absorbed or q to infer it from, "
      "expected the number of MLA heads");
}

std::pair<int32_t, int32_t> request_range(const StepPlan& plan, int32_t begin, int32_t end,
                                          int32_t default_begin, int32_t default_end) {
  if (begin < 0 && end < 0) return {default_begin, default_end};
  if (begin < 0) begin = default_begin;
  if (end < 0) end = default_end;
  if (begin > end || end > plan.num_requests) {
    throw_arg_error("request_begin, request_end",
                    "[" + std::to_string(begin) + ", " + std::to_string(end) + ")",
                    "a request range within [0, " + std::to_string(plan.num_requests) + "]");
  }
  return {begin, end};
}

nb::dict build_info_dict() {
  const BuildInfo b = build_info();
  nb::dict d;
  d["version"] = b.version;
  d["with_cuda"] = b.with_cuda;
  d["cuda_archs"] = b.cuda_archs;
  d["num_threads"] = b.num_threads;
  d["gpu_found"] = b.gpu_found;
  d["gpu_name"] = b.gpu_name;
  d["gpu_sm_count"] = b.gpu_sm_count;
  d["gpu_compute_capability"] = b.gpu_compute_capability;
  d["gpu_memory_bytes"] = b.gpu_memory_bytes;
  d["cuda_specializations"] = b.cuda_specializations;
  return d;
}

nb::dict tensor_info(const InArray& a, nb::handle cache_dtype) {
  const TensorView t = cache_dtype.is_none() ? as_view(a, "array")
                                             : as_cache_view(a, "array", dtype_arg(cache_dtype));
  nb::dict d;
  d["dtype"] = std::string(dtype_name(t.dtype));
  d["device"] = std::string(device_name(t.device));
  d["device_index"] = t.device_index;
  d["shape"] = int_tuple(std::vector<int64_t>(t.shape, t.shape + t.ndim));
  d["strides"] = int_tuple(std::vector<int64_t>(t.strides, t.strides + t.ndim));
  d["contiguous"] = t.is_contiguous();
  d["data_ptr"] = reinterpret_cast<uintptr_t>(t.data);
  return d;
}

}  // namespace

void bind(nb::module_& m) {
  // ---- errors ----
  g_error = PyErr_NewExceptionWithDoc(
      "tripath._tripath.Error",
      "A tripath argument or state error (a ValueError): the message names the argument, the "
      "bad value and what was expected.",
      PyExc_ValueError, nullptr);
  nb::object bases = nb::make_tuple(nb::handle(g_error), nb::handle(PyExc_RuntimeError));
  g_out_of_blocks = PyErr_NewExceptionWithDoc(
      "tripath._tripath.OutOfBlocksError",
      "The block pool has too few free blocks. Recoverable: the pool is unchanged, so the engine "
      "can preempt a request and retry.",
      bases.ptr(), nullptr);
  m.attr("Error") = nb::handle(g_error);
  m.attr("OutOfBlocksError") = nb::handle(g_out_of_blocks);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const OutOfBlocksError& e) {
      PyErr_SetString(g_out_of_blocks, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });

  // ---- enums ----
  nb::enum_<DType>(m, "DType", "Element type of tensors and caches.")
      .value("f32", DType::kF32)
      .value("f16", DType::kF16)
      .value("bf16", DType::kBF16)
      .value("fp8_e4m3", DType::kFP8E4M3)
      .value("i32", DType::kI32)
      .value("i64", DType::kI64);
  nb::enum_<KvLayout>(m, "KvLayout", "Paged KV cache layout.")
      .value("nhd", KvLayout::kNHD)
      .value("hnd", KvLayout::kHND)
      .value("tiled", KvLayout::kTiled);
  nb::enum_<RequestClass>(m, "RequestClass", "Class of a request in a step.")
      .value("decode", RequestClass::kDecode)
      .value("extend", RequestClass::kExtend)
      .value("prefill", RequestClass::kPrefill);

  m.def(
      "dtype_size", [](nb::handle d) { return dtype_size(dtype_arg(d)); }, "dtype"_a,
      "Bytes per element of a dtype.");
  m.def(
      "dtype_name", [](nb::handle d) { return std::string(dtype_name(dtype_arg(d))); }, "dtype"_a,
      "Canonical name of a dtype: f32, f16, bf16, fp8_e4m3.");
  m.def(
      "encode",
      [](const F32Array& x, nb::handle dtype) -> nb::object {
        const DType t = dtype_arg(dtype);
        if (t == DType::kI32 || t == DType::kI64)
          throw_arg_error("dtype", dtype_name(t), "a floating type: f32, f16, bf16, fp8_e4m3");
        const size_t n = x.size();
        std::vector<size_t> shape(x.ndim());
        for (size_t i = 0; i < x.ndim(); ++i) shape[i] = x.shape(i);
        auto fill = [&](auto tag) {
          using T = decltype(tag);
          std::vector<T> bits(n);
          for (size_t i = 0; i < n; ++i)
            store_float(bits.data(), t, static_cast<int64_t>(i), x.data()[i]);
          return numpy_copy(bits, shape);
        };
        switch (dtype_size(t)) {
          case 1:
            return fill(uint8_t{});
          case 2:
            return fill(uint16_t{});
          default:
            return fill(float{});
        }
      },
      "x"_a, "dtype"_a,
      "Rounds float32 values to `dtype` (nearest even; fp8 saturates to +-448) and returns the "
      "storage: uint8 for fp8_e4m3, uint16 for f16/bf16, float32 for f32.");
  m.def(
      "decode",
      [](const InArray& bits, nb::handle dtype) -> nb::object {
        const DType t = dtype_arg(dtype);
        TensorView v = as_cache_view(bits, "bits", t);
        if (v.device != Device::kCPU || !v.is_contiguous())
          throw_arg_error("bits", v.shape_text(), "a contiguous CPU array");
        std::vector<float> out(static_cast<size_t>(v.numel()));
        for (size_t i = 0; i < out.size(); ++i)
          out[i] = load_float(v.data, t, static_cast<int64_t>(i));
        std::vector<size_t> shape(static_cast<size_t>(v.ndim));
        for (int i = 0; i < v.ndim; ++i)
          shape[static_cast<size_t>(i)] = static_cast<size_t>(v.shape[i]);
        return numpy_copy(out, shape);
      },
      "bits"_a, "dtype"_a, "Widens storage of `dtype` (as from encode()) to float32.");
  m.def("tensor_info", &tensor_info, "array"_a, "cache_dtype"_a.none() = nb::none(),
        "How an array converts to a tripath tensor view (dtype, device, shape, strides in "
        "elements); cache_dtype applies the cache-tensor rule. For debugging the binding.");

  // ---- backends and build ----
  m.def(
      "version", [] { return build_info().version; }, "The library version.");
  m.def("build_info", &build_info_dict,
        "Version, CUDA build and architectures, reference threads, and the GPU found.");
  m.def(
      "list_backends",
      [] {
        nb::list result;
        for (const BackendInfo& b : list_backends()) {
          nb::dict d;
          d["name"] = b.name;
          d["is_mla"] = b.is_mla;
          d["available"] = b.available;
          d["reason"] = b.reason;
          result.append(d);
        }
        return result;
      },
      "Every backend with its availability here: dicts {name, is_mla, available, reason}.");
  m.def(
      "resolve_backend", [](std::string_view name, bool mla) { return resolve_backend(name, mla); },
      "name"_a, "mla"_a = false,
      "Resolves 'auto' and checks availability; raises tripath.Error listing the valid names.");
  m.def(
      "backend_from_env", [](bool mla) { return backend_from_env(mla); }, "mla"_a = false,
      "The backend named by TRIPATH_BACKEND (mla: TRIPATH_MLA_BACKEND), 'auto' if unset, "
      "resolved.");
  m.def(
      "supported_head_dims",
      [] { return std::vector<int>(std::begin(kSupportedHeadDims), std::end(kSupportedHeadDims)); },
      "Head dims every MHA backend supports.");

  // ---- cache configs ----
  nb::class_<KvCacheConfig>(m, "KvCacheConfig", "Configuration of one layer's paged K/V cache.")
      .def(
          "__init__",
          [](KvCacheConfig* self, int64_t num_blocks, int block_size, int num_kv_heads,
             int head_dim, nb::handle dtype, nb::handle layout, float k_scale, float v_scale) {
            KvCacheConfig c;
            c.num_blocks = num_blocks;
            c.block_size = block_size;
            c.num_kv_heads = num_kv_heads;
            c.head_dim = head_dim;
            c.dtype = dtype_arg(dtype);
            c.layout = layout_arg(layout);
            c.k_scale = k_scale;
            c.v_scale = v_scale;
            new (self) KvCacheConfig(c);
          },
          "num_blocks"_a = 0, "block_size"_a = 16, "num_kv_heads"_a = 0, "head_dim"_a = 0,
          "dtype"_a = "bf16", "layout"_a = "nhd", "k_scale"_a = 1.0f, "v_scale"_a = 1.0f)
      .def_rw("num_blocks", &KvCacheConfig::num_blocks)
      .def_rw("block_size", &KvCacheConfig::block_size)
      .def_rw("num_kv_heads", &KvCacheConfig::num_kv_heads)
      .def_rw("head_dim", &KvCacheConfig::head_dim)
      .def_prop_rw(
          "dtype", [](const KvCacheConfig& c) { return c.dtype; },
          [](KvCacheConfig& c, nb::handle d) { c.dtype = dtype_arg(d); })
      .def_prop_rw(
          "layout", [](const KvCacheConfig& c) { return c.layout; },
          [](KvCacheConfig& c, nb::handle l) { c.layout = layout_arg(l); })
      .def_rw("k_scale", &KvCacheConfig::k_scale)
      .def_rw("v_scale", &KvCacheConfig::v_scale)
      .def("validate", &KvCacheConfig::validate, "Raises tripath.Error naming a bad field.")
      .def(
          "shape", [](const KvCacheConfig& c) { return int_tuple(c.shape()); },
          "Storage shape of one of K or V.")
      .def("elements_per_tensor", &KvCacheConfig::elements_per_tensor)
      .def("bytes_per_tensor", &KvCacheConfig::bytes_per_tensor)
      .def("__repr__", [](const KvCacheConfig& c) {
        std::ostringstream s;
        s << "KvCacheConfig(num_blocks=" << c.num_blocks << ", block_size=" << c.block_size
          << ", num_kv_heads=" << c.num_kv_heads << ", head_dim=" << c.head_dim << ", dtype='"
          << dtype_name(c.dtype) << "', layout='" << layout_name(c.layout)
          << "', k_scale=" << c.k_scale << ", v_scale=" << c.v_scale << ")";
        return s.str();
      });

  m.def(
      "kv_cache_shape", [](const KvCacheConfig& c) { return int_tuple(c.shape()); }, "config"_a,
      "Storage shape of one of K or V for `config`.");
  m.def("kv_cache_offset", &kv_cache_offset, "config"_a, "block"_a, "slot"_a, "head"_a, "dim"_a,
        "Element offset of (block, slot, kv head, dim) in one K or V cache tensor.");
  m.def("tiled_chunk", &tiled_chunk, "chunk"_a, "row"_a, "chunks_per_row"_a,
        "Physical 16-byte chunk of logical chunk `chunk` in row `row` of the tiled layout.");

  nb::class_<MlaCacheConfig>(
      m, "MlaCacheConfig",
      "Configuration of one layer's MLA latent cache [blocks, block_size, 576].")
      .def(
          "__init__",
          [](MlaCacheConfig* self, int64_t num_blocks, int block_size, nb::handle dtype,
             float scale) {
            MlaCacheConfig c;
            c.num_blocks = num_blocks;
            c.block_size = block_size;
            c.dtype = dtype_arg(dtype);
            c.scale = scale;
            new (self) MlaCacheConfig(c);
          },
          "num_blocks"_a = 0, "block_size"_a = 16, "dtype"_a = "bf16", "scale"_a = 1.0f)
      .def_rw("num_blocks", &MlaCacheConfig::num_blocks)
      .def_rw("block_size", &MlaCacheConfig::block_size)
      .def_prop_rw(
          "dtype", [](const MlaCacheConfig& c) { return c.dtype; },
          [](MlaCacheConfig& c, nb::handle d) { c.dtype = dtype_arg(d); })
      .def_rw("scale", &MlaCacheConfig::scale)
      .def("validate", &MlaCacheConfig::validate)
      .def("shape", [](const MlaCacheConfig& c) { return int_tuple(c.shape()); })
      .def("elements", &MlaCacheConfig::elements)
      .def("__repr__", [](const MlaCacheConfig& c) {
        std::ostringstream s;
        s << "MlaCacheConfig(num_blocks=" << c.num_blocks << ", block_size=" << c.block_size
          << ", dtype='" << dtype_name(c.dtype) << "', scale=" << c.scale << ")";
        return s.str();
      });
  m.attr("MLA_LATENT_DIM") = kMlaLatentDim;
  m.attr("MLA_ROPE_DIM") = kMlaRopeDim;
  m.attr("MLA_ENTRY_DIM") = kMlaEntryDim;
  m.attr("MLA_NOPE_DIM") = kMlaNopeDim;
  m.attr("MLA_QK_DIM") = kMlaQkDim;
  m.attr("MLA_V_DIM") = kMlaVDim;

  // ---- block allocator ----
  nb::class_<BlockAllocator>(m, "BlockAllocator",
                             "Fixed pool of cache blocks with reference counts.")
      .def(nb::init<int64_t>(), "num_blocks"_a)
      .def_prop_ro("num_blocks", &BlockAllocator::num_blocks)
      .def("num_free", &BlockAllocator::num_free)
      .def("ref_count", &BlockAllocator::ref_count, "block"_a)
      .def("allocate", &BlockAllocator::allocate, "count"_a,
           "`count` fresh blocks; raises OutOfBlocksError (pool unchanged) if too few are free.")
      .def(
          "try_allocate",
          [](BlockAllocator& a, int64_t count) -> std::optional<std::vector<int32_t>> {
            std::vector<int32_t> out;
            if (!a.try_allocate(count, out)) return std::nullopt;
            return out;
          },
          "count"_a, "`count` fresh blocks, or None (pool unchanged) if too few are free.")
      .def("fork", &BlockAllocator::fork, "blocks"_a,
           "Shares `blocks` with one more owner; returns them.")
      .def("free", &BlockAllocator::free, "blocks"_a, "Drops one reference to each block.")
      .def_static("blocks_for_tokens", &BlockAllocator::blocks_for_tokens, "tokens"_a,
                  "block_size"_a);

  // ---- planner ----
  nb::class_<StepPlan>(m, "StepPlan",
                       "The host-side plan of one step (see plan_step). Arrays are copies.")
      .def_ro("serial", &StepPlan::serial, "Unique per plan_step call.")
      .def_ro("num_requests", &StepPlan::num_requests)
      .def_ro("num_tokens", &StepPlan::num_tokens)
      .def_ro("block_size", &StepPlan::block_size)
      .def_ro("decode_threshold", &StepPlan::decode_threshold)
      .def_ro("num_cache_blocks", &StepPlan::num_cache_blocks)
      .def_prop_ro(
          "classes",
          [](const StepPlan& p) {
            std::vector<int32_t> c(p.classes.size());
            for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<int32_t>(p.classes[i]);
            return numpy_copy(c);
          },
          "Class of each request in input order: 0 decode, 1 extend, 2 prefill.")
      .def_prop_ro("class_names",
                   [](const StepPlan& p) {
                     std::vector<std::string> names;
                     for (RequestClass c : p.classes) names.emplace_back(class_name(c));
                     return names;
                   })
      .def_prop_ro(
          "order", [](const StepPlan& p) { return numpy_copy(p.order); },
          "order[i] = input index of the request at ordered position i.")
      .def_prop_ro(
          "inverse", [](const StepPlan& p) { return numpy_copy(p.inverse); },
          "inverse[input index] = ordered position.")
      .def_ro("is_ordered", &StepPlan::is_ordered)
      .def_prop_ro("query_lens", [](const StepPlan& p) { return numpy_copy(p.query_lens); })
      .def_prop_ro("context_lens", [](const StepPlan& p) { return numpy_copy(p.context_lens); })
      .def_prop_ro("seq_lens",
                   [](const StepPlan& p) {
                     std::vector<int32_t> s(static_cast<size_t>(p.num_requests));
                     for (int32_t i = 0; i < p.num_requests; ++i)
                       s[static_cast<size_t>(i)] = p.seq_len(i);
                     return numpy_copy(s);
                   })
      .def_prop_ro("cu_seqlens_q", [](const StepPlan& p) { return numpy_copy(p.cu_seqlens_q); })
      .def_prop_ro("cu_seqlens_k", [](const StepPlan& p) { return numpy_copy(p.cu_seqlens_k); })
      .def_ro("max_query_len", &StepPlan::max_query_len)
      .def_ro("max_decode_query_len", &StepPlan::max_decode_query_len)
      .def_ro("max_seq_len", &StepPlan::max_seq_len)
      .def_ro("max_blocks_per_request", &StepPlan::max_blocks_per_request)
      .def_prop_ro(
          "block_table",
          [](const StepPlan& p) {
            return numpy_matrix(p.block_table, p.num_requests, p.max_blocks_per_request);
          },
          "[num_requests, max_blocks_per_request], rows in the plan's layout.")
      .def_prop_ro("slot_mapping", [](const StepPlan& p) { return numpy_copy(p.slot_mapping); })
      .def_prop_ro(
          "decode", [](const StepPlan& p) { return range_tuple(p.decode); },
          "(begin, end, token_begin, token_end) of the decode path.")
      .def_prop_ro("extend", [](const StepPlan& p) { return range_tuple(p.extend); })
      .def_prop_ro("prefill", [](const StepPlan& p) { return range_tuple(p.prefill); })
      .def_ro("extend_chunk_budget", &StepPlan::extend_chunk_budget)
      .def_ro("num_chunks", &StepPlan::num_chunks)
      .def_prop_ro(
          "chunk_kv_start",
          [](const StepPlan& p) {
            return numpy_matrix(p.chunk_kv_start, p.num_chunks, p.extend.num_requests());
          },
          "[num_chunks, extend requests]")
      .def_prop_ro(
          "chunk_kv_len",
          [](const StepPlan& p) {
            return numpy_matrix(p.chunk_kv_len, p.num_chunks, p.extend.num_requests());
          },
          "[num_chunks, extend requests]")
      .def_prop_ro(
          "chunk_cu_kv",
          [](const StepPlan& p) {
            return numpy_matrix(p.chunk_cu_kv, p.num_chunks, p.extend.num_requests() + 1);
          },
          "[num_chunks, extend requests + 1]")
      .def_ro("split_tokens", &StepPlan::split_tokens)
      .def_prop_ro("num_splits", &StepPlan::num_splits)
      .def_prop_ro("decode_cu_splits",
                   [](const StepPlan& p) { return numpy_copy(p.decode_cu_splits); })
      .def_prop_ro("split_request", [](const StepPlan& p) { return numpy_copy(p.split_request); })
      .def_prop_ro("split_kv_start", [](const StepPlan& p) { return numpy_copy(p.split_kv_start); })
      .def_prop_ro("split_kv_len", [](const StepPlan& p) { return numpy_copy(p.split_kv_len); })
      .def_prop_ro("num_segments", &StepPlan::num_segments)
      .def_prop_ro("segment_cu_pieces",
                   [](const StepPlan& p) { return numpy_copy(p.segment_cu_pieces); })
      .def_prop_ro("decode_cu_pieces",
                   [](const StepPlan& p) { return numpy_copy(p.decode_cu_pieces); })
      .def_prop_ro("piece_request", [](const StepPlan& p) { return numpy_copy(p.piece_request); })
      .def_prop_ro("piece_kv_start", [](const StepPlan& p) { return numpy_copy(p.piece_kv_start); })
      .def_prop_ro("piece_kv_len", [](const StepPlan& p) { return numpy_copy(p.piece_kv_len); })
      .def(
          "seq_len",
          [](const StepPlan& p, int32_t i) {
            if (i < 0 || i >= p.num_requests)
              throw_arg_error("i", std::to_string(i),
                              "a position in [0, " + std::to_string(p.num_requests) + ")");
            return p.seq_len(i);
          },
          "i"_a)
      .def("__repr__", [](const StepPlan& p) {
        std::ostringstream s;
        s << "StepPlan(num_requests=" << p.num_requests << ", num_tokens=" << p.num_tokens
          << ", decode=" << range_text(p.decode) << ", extend=" << range_text(p.extend)
          << ", prefill=" << range_text(p.prefill) << ", num_chunks=" << p.num_chunks
          << ", num_splits=" << p.num_splits()
          << ", is_ordered=" << (p.is_ordered ? "True" : "False") << ")";
        return s.str();
      });

  m.def(
      "plan_step",
      [](std::vector<int32_t> query_lens, std::vector<int32_t> context_lens,
         const BlockTableArray& block_table, int64_t num_cache_blocks, int block_size,
         int decode_threshold, int64_t extend_chunk_budget, int num_work_units, int num_kv_heads,
         int min_split_tokens, int split_waves, int decode_segments) {
        const size_t n = query_lens.size();
        if (block_table.shape(0) < n) {
          throw_arg_error("block_table",
                          "shape [" + std::to_string(block_table.shape(0)) + ", " +
                              std::to_string(block_table.shape(1)) + "]",
                          "at least one row per request (" + std::to_string(n) + ")");
        }
        StepInput in;
        in.query_lens = std::move(query_lens);
        in.context_lens = std::move(context_lens);
        in.block_table = block_table.data();
        in.block_table_stride = static_cast<int64_t>(block_table.shape(1));
        in.num_cache_blocks = num_cache_blocks;
        in.block_size = block_size;
        in.decode_threshold = decode_threshold;
        in.extend_chunk_budget = extend_chunk_budget;
        in.num_work_units = num_work_units;
        in.num_kv_heads = num_kv_heads;
        in.min_split_tokens = min_split_tokens;
        in.split_waves = split_waves;
        in.decode_segments = decode_segments;
        nb::gil_scoped_release release;
        return plan_step(in);
      },
      "query_lens"_a, "context_lens"_a, "block_table"_a, "num_cache_blocks"_a, "block_size"_a = 16,
      "decode_threshold"_a = 1, "extend_chunk_budget"_a = 32768, "num_work_units"_a = 1,
      "num_kv_heads"_a = 1, "min_split_tokens"_a = 256, "split_waves"_a = 2,
      "decode_segments"_a = 1,
      "Plans one step; block_table is a 2-D C-contiguous int32 array.");

  m.def(
      "reorder_token_rows",
      [](const StepPlan& plan, const InArray& src, const OutArray& dst) {
        const TensorView s = view_common(src, "src");
        const TensorView d = view_common(dst, "dst");
        bool same = s.ndim == d.ndim && src.dtype() == dst.dtype();
        for (int i = 0; same && i < s.ndim; ++i) same = s.shape[i] == d.shape[i];
        TRIPATH_CHECK_ARG(
            same, "dst", d.shape_text() + " " + dlpack_dtype_text(dst.dtype()),
            "the shape and dtype of src: " + s.shape_text() + " " + dlpack_dtype_text(src.dtype()));
        for (const TensorView* t : {&s, &d}) {
          const char* name = t == &s ? "src" : "dst";
          TRIPATH_CHECK_ARG(t->device == Device::kCPU && t->is_contiguous(), name,
                            std::string("a ") + (t->is_contiguous() ? "" : "strided ") +
                                device_name(t->device) + " array",
                            "a contiguous CPU array");
        }
        TRIPATH_CHECK_ARG(s.shape[0] == plan.num_tokens, "src", "shape " + s.shape_text(),
                          std::to_string(plan.num_tokens) + " rows (plan.num_tokens)");
        const int64_t row_bytes =
            (s.shape[0] == 0 ? 0 : s.numel() / s.shape[0]) * static_cast<int64_t>(src.itemsize());
        nb::gil_scoped_release release;
        reorder_token_rows(plan, s.data, d.data, row_bytes);
      },
      "plan"_a, "src"_a, "dst"_a,
      "Copies per-token rows [num_tokens, ...] of an input-order batch into the plan's ordered "
      "layout (dst). Any dtype; CPU arrays.");

  // ---- attention ----
  nb::class_<AttentionParams>(m, "AttentionParams", "Arguments of one MHA/GQA/MQA layer call.")
      .def(
          "__init__",
          [](AttentionParams* self, int num_q_heads, int num_kv_heads, int head_dim, float scale,
             int window_left, float softcap, bool has_sinks) {
            AttentionParams p;
            p.num_q_heads = num_q_heads;
            p.num_kv_heads = num_kv_heads;
            p.head_dim = head_dim;
            p.scale = scale;
            p.window_left = window_left;
            p.softcap = softcap;
            p.has_sinks = has_sinks;
            new (self) AttentionParams(p);
          },
          "num_q_heads"_a = 0, "num_kv_heads"_a = 0, "head_dim"_a = 0, "scale"_a = 0.0f,
          "window_left"_a = -1, "softcap"_a = 0.0f, "has_sinks"_a = false)
      .def_rw("num_q_heads", &AttentionParams::num_q_heads)
      .def_rw("num_kv_heads", &AttentionParams::num_kv_heads)
      .def_rw("head_dim", &AttentionParams::head_dim)
      .def_rw("scale", &AttentionParams::scale)
      .def_rw("window_left", &AttentionParams::window_left)
      .def_rw("softcap", &AttentionParams::softcap)
      .def_rw("has_sinks", &AttentionParams::has_sinks)
      .def("effective_scale", &AttentionParams::effective_scale)
      .def("validate", &AttentionParams::validate, "cache"_a,
           "Checks heads and head dim against the cache config; raises tripath.Error.")
      .def("__repr__", [](const AttentionParams& p) {
        std::ostringstream s;
        s << "AttentionParams(num_q_heads=" << p.num_q_heads << ", num_kv_heads=" << p.num_kv_heads
          << ", head_dim=" << p.head_dim << ", scale=" << p.scale
          << ", window_left=" << p.window_left << ", softcap=" << p.softcap
          << ", has_sinks=" << (p.has_sinks ? "True" : "False") << ")";
        return s.str();
      });

  nb::class_<MlaParams>(m, "MlaParams", "Arguments of one MLA layer call.")
      .def(
          "__init__",
          [](MlaParams* self, int num_heads, float scale) {
            new (self) MlaParams();
            self->num_heads = num_heads;
            self->scale = scale;
          },
          "num_heads"_a = 0, "scale"_a = 0.0f)
      .def_rw("num_heads", &MlaParams::num_heads)
      .def_rw("scale", &MlaParams::scale)
      .def("effective_scale", &MlaParams::effective_scale)
      .def("validate", &MlaParams::validate);

  nb::class_<AttentionBackend>(m, "AttentionBackend", "An MHA/GQA backend instance.")
      .def_prop_ro("name", [](const AttentionBackend& b) { return std::string(b.name()); })
      .def("needs_ordered_batch", &AttentionBackend::needs_ordered_batch)
      .def("check_supported", &AttentionBackend::check_supported, "params"_a, "cache"_a)
      .def(
          "prepare",
          [](AttentionBackend& b, const StepPlan& plan, const AttentionParams& params,
             uintptr_t stream) {
            nb::gil_scoped_release release;
            b.prepare(plan, params, stream_arg(stream));
          },
          "plan"_a, "params"_a, "stream"_a = 0,
          "Once per step before its run calls: CUDA backends upload the plan here.")
      .def("__repr__", [](const AttentionBackend& b) {
        return std::string("<tripath.AttentionBackend '") + b.name() + "'>";
      });
  nb::class_<MlaBackend>(m, "MlaBackend", "An MLA backend instance.")
      .def_prop_ro("name", [](const MlaBackend& b) { return std::string(b.name()); })
      .def(
          "prepare",
          [](MlaBackend& b, const StepPlan& plan, const MlaParams& params, uintptr_t stream) {
            nb::gil_scoped_release release;
            b.prepare(plan, params, stream_arg(stream));
          },
          "plan"_a, "params"_a, "stream"_a = 0,
          "Once per step before its run calls: CUDA backends upload the plan here.")
      .def("__repr__", [](const MlaBackend& b) {
        return std::string("<tripath.MlaBackend '") + b.name() + "'>";
      });
  m.def(
      "create_attention_backend",
      [](std::string_view name) { return create_attention_backend(resolve_backend(name, false)); },
      "name"_a, "A new MHA backend ('auto' resolved).");
  m.def(
      "create_mla_backend",
      [](std::string_view name) { return create_mla_backend(resolve_backend(name, true)); },
      "name"_a, "A new MLA backend ('auto' resolved).");
  m.def(
      "check_ordered",
      [](const StepPlan& p, const std::string& name) { check_ordered(p, name.c_str()); }, "plan"_a,
      "backend_name"_a);

  m.def(
      "write_kv_cache",
      [](const KvCacheConfig& cache, const OutArray& k_cache, const OutArray& v_cache,
         const InArray& k, const InArray& v, const InArray& slot_mapping, uintptr_t stream) {
        KvCacheView view;
        view.config = cache;
        view.k = as_cache_view(k_cache, "k_cache", cache.dtype);
        view.v = as_cache_view(v_cache, "v_cache", cache.dtype);
        const TensorView kt = as_view(k, "k");
        const TensorView vt = as_view(v, "v");
        const TensorView st = as_view(slot_mapping, "slot_mapping");
        nb::gil_scoped_release release;
        write_kv_cache(view, kt, vt, st, stream_arg(stream));
      },
      "cache_config"_a, "k_cache"_a, "v_cache"_a, "k"_a, "v"_a, "slot_mapping"_a, "stream"_a = 0,
      "Writes new K/V rows into the cache at slot_mapping (int64, on the tensors' device); "
      "slot -1 is skipped. CPU tensors: the reference; CUDA tensors: the CUDA writer.");

  m.def(
      "run_attention",
      [](nb::handle backend, const StepPlan& plan, const KvCacheConfig& cache, const InArray& q,
         std::optional<InArray> k, std::optional<InArray> v, const OutArray& k_cache,
         const OutArray& v_cache, const OutArray& out, std::optional<OutArray> lse,
         std::optional<InArray> sinks, float scale, int window_left, float softcap,
         std::optional<AttentionParams> params, bool write_cache, bool prepare, uintptr_t stream) {
        auto ref = backend_arg<AttentionBackend>(backend);
        // A backend made for this call has not seen the plan: it is always prepared.
        run_attention_with(*ref.backend, plan, cache, q, k, v, k_cache, v_cache, out, lse, sinks,
                           scale, window_left, softcap, params, write_cache,
                           prepare || ref.owned != nullptr, stream);
      },
      "backend"_a, "plan"_a, "cache_config"_a, "q"_a, "k"_a.none(), "v"_a.none(), "k_cache"_a,
      "v_cache"_a, "out"_a, "lse"_a.none() = nb::none(), "sinks"_a.none() = nb::none(),
      "scale"_a = 0.0f, "window_left"_a = -1, "softcap"_a = 0.0f, "params"_a.none() = nb::none(),
      "write_cache"_a = true, "prepare"_a = true, "stream"_a = 0,
      "prepare(plan) (when `prepare`), cache write (k/v given and write_cache), then attention "
      "through a backend.");

  auto reference_attention = [](auto fn) {
    return [fn](const StepPlan& plan, const KvCacheConfig& cache, const InArray& q,
                const OutArray& k_cache, const OutArray& v_cache, const OutArray& out,
                std::optional<OutArray> lse, std::optional<InArray> sinks, float scale,
                int window_left, float softcap, std::optional<AttentionParams> params) {
      AttentionInputs in =
          make_inputs(cache, q, std::nullopt, std::nullopt, k_cache, v_cache, out, lse, sinks);
      const AttentionParams p =
          make_params(in.q, cache, scale, window_left, softcap, in.sinks.defined(), params);
      nb::gil_scoped_release release;
      fn(plan, p, in);
    };
  };
  m.def("attention_direct", reference_attention(&reference::attention_direct), "plan"_a,
        "cache_config"_a, "q"_a, "k_cache"_a, "v_cache"_a, "out"_a, "lse"_a.none() = nb::none(),
        "sinks"_a.none() = nb::none(), "scale"_a = 0.0f, "window_left"_a = -1, "softcap"_a = 0.0f,
        "params"_a.none() = nb::none(),
        "Reference attention read straight from the paged cache (no cache write).");
  m.def("attention_three_path", reference_attention(&reference::attention_three_path), "plan"_a,
        "cache_config"_a, "q"_a, "k_cache"_a, "v_cache"_a, "out"_a, "lse"_a.none() = nb::none(),
        "sinks"_a.none() = nb::none(), "scale"_a = 0.0f, "window_left"_a = -1, "softcap"_a = 0.0f,
        "params"_a.none() = nb::none(),
        "Reference attention composed from the three paths on an ordered plan (no write).");

  m.def(
      "merge_states",
      [](const InArray& outs, const InArray& lses, const OutArray& out, std::optional<OutArray> lse,
         uintptr_t stream) {
        const TensorView a = as_view(outs, "outs"), b = as_view(lses, "lses");
        const TensorView c = as_view(out, "out");
        const TensorView d = lse ? as_view(*lse, "lse") : TensorView{};
        nb::gil_scoped_release release;
        merge_states(a, b, c, d, stream_arg(stream));
      },
      "outs"_a, "lses"_a, "out"_a, "lse"_a.none(), "stream"_a = 0,
      "Log-sum-exp merge: outs [parts, rows, dim], lses [parts, rows] -> out, lse.");

  // ---- MLA ----
  m.def(
      "write_mla_cache",
      [](const MlaCacheConfig& cache, const OutArray& latent_cache, const InArray& latent,
         const SlotArray& slot_mapping) {
        MlaCacheView view;
        view.config = cache;
        view.latent = as_cache_view(latent_cache, "latent_cache", cache.dtype);
        const TensorView l = as_view(latent, "latent");
        nb::gil_scoped_release release;
        reference::write_mla_cache(view, l, slot_mapping.data(),
                                   static_cast<int64_t>(slot_mapping.shape(0)));
      },
      "cache_config"_a, "latent_cache"_a, "latent"_a, "slot_mapping"_a,
      "Writes new latent rows [tokens, 576] into the MLA cache (CPU reference).");

  m.def(
      "mla_decode",
      [](const StepPlan& plan, const MlaCacheConfig& cache, const OutArray& latent_cache,
         const InArray& q, const OutArray& out, std::optional<OutArray> lse, int32_t request_begin,
         int32_t request_end, float scale) {
        MlaCacheView view;
        view.config = cache;
        view.latent = as_cache_view(latent_cache, "latent_cache", cache.dtype);
        const TensorView qt = as_view(q, "q");
        const TensorView ot = as_view(out, "out");
        const TensorView lt = lse ? as_view(*lse, "lse") : TensorView{};
        MlaParams p;
        p.num_heads = mla_num_heads(0, qt, std::nullopt);
        p.scale = scale;
        const auto range =
            request_range(plan, request_begin, request_end, plan.decode.begin, plan.decode.end);
        nb::gil_scoped_release release;
        reference::mla_absorbed(plan, range.first, range.second, p, view, qt, ot, lt);
      },
      "plan"_a, "cache_config"_a, "latent_cache"_a, "q"_a, "out"_a, "lse"_a.none() = nb::none(),
      "request_begin"_a = -1, "request_end"_a = -1, "scale"_a = 0.0f,
      "Reference absorbed MLA: q [tokens, heads, 576] -> out [tokens, heads, 512] for requests "
      "[request_begin, request_end) of the ordered plan (default: the decode path).");

  m.def(
      "mla_prefill",
      [](const StepPlan& plan, const MlaCacheConfig& cache, const OutArray& latent_cache,
         const InArray& q, const InArray& kv_b_proj, const OutArray& out,
         std::optional<OutArray> lse, int32_t request_begin, int32_t request_end, float scale,
         int64_t chunk_tokens) {
        MlaCacheView view;
        view.config = cache;
        view.latent = as_cache_view(latent_cache, "latent_cache", cache.dtype);
        const TensorView qt = as_view(q, "q");
        const TensorView wt = as_view(kv_b_proj, "kv_b_proj");
        const TensorView ot = as_view(out, "out");
        const TensorView lt = lse ? as_view(*lse, "lse") : TensorView{};
        MlaParams p;
        p.num_heads = mla_num_heads(0, qt, std::nullopt);
        p.scale = scale;
        const auto range =
            request_range(plan, request_begin, request_end, plan.extend.begin, plan.prefill.end);
        nb::gil_scoped_release release;
        reference::mla_non_absorbed(plan, range.first, range.second, p, view, qt, wt, ot, lt,
                                    chunk_tokens);
      },
      "plan"_a, "cache_config"_a, "latent_cache"_a, "q"_a, "kv_b_proj"_a, "out"_a,
      "lse"_a.none() = nb::none(), "request_begin"_a = -1, "request_end"_a = -1, "scale"_a = 0.0f,
      "chunk_tokens"_a = 0,
      "Reference non-absorbed MLA: q [tokens, heads, 192] -> out [tokens, heads, 128] for "
      "requests [request_begin, request_end) of the ordered plan (default: extend + prefill).");

  m.def(
      "run_mla",
      [](nb::handle backend, const StepPlan& plan, const MlaCacheConfig& cache,
         const OutArray& latent_cache, std::optional<InArray> latent,
         std::optional<InArray> q_absorbed, std::optional<OutArray> out_absorbed,
         std::optional<OutArray> lse_absorbed, std::optional<InArray> q,
         std::optional<InArray> kv_b_proj, std::optional<OutArray> out, std::optional<OutArray> lse,
         float scale, int num_heads, bool write_cache, bool prepare, uintptr_t stream) {
        auto ref = backend_arg<MlaBackend>(backend);
        prepare = prepare || ref.owned != nullptr;
        MlaInputs in;
        in.cache.config = cache;
        in.cache.latent = as_cache_view(latent_cache, "latent_cache", cache.dtype);
        if (latent && write_cache) in.latent = as_view(*latent, "latent");
        const auto qa = as_view(q_absorbed, "q_absorbed");
        const auto qn = as_view(q, "q");
        if (qa) in.q_absorbed = *qa;
        if (qn) in.q = *qn;
        if (auto t = as_view(out_absorbed, "out_absorbed")) in.out_absorbed = *t;
        if (auto t = as_view(lse_absorbed, "lse_absorbed")) in.lse_absorbed = *t;
        if (auto t = as_view(kv_b_proj, "kv_b_proj")) in.kv_b_proj = *t;
        if (auto t = as_view(out, "out")) in.out = *t;
        if (auto t = as_view(lse, "lse")) in.lse = *t;
        MlaParams p;
        p.num_heads = mla_num_heads(num_heads, qa, qn);
        p.scale = scale;
        in.stream = stream_arg(stream);
        nb::gil_scoped_release release;
        if (prepare) ref.backend->prepare(plan, p, in.stream);
        ref.backend->run(plan, p, in);
      },
      "backend"_a, "plan"_a, "cache_config"_a, "latent_cache"_a, "latent"_a.none() = nb::none(),
      "q_absorbed"_a.none() = nb::none(), "out_absorbed"_a.none() = nb::none(),
      "lse_absorbed"_a.none() = nb::none(), "q"_a.none() = nb::none(),
      "kv_b_proj"_a.none() = nb::none(), "out"_a.none() = nb::none(), "lse"_a.none() = nb::none(),
      "scale"_a = 0.0f, "num_heads"_a = 0, "write_cache"_a = true, "prepare"_a = true,
      "stream"_a = 0,
      "Latent cache write, then absorbed decode and non-absorbed extend/prefill through an MLA "
      "backend on an ordered plan.");
}

}  // namespace tripath::python

NB_MODULE(_tripath, m) {
  m.doc() = "tripath: paged-attention backends (native module; use the `tripath` package).";
  tripath::python::bind(m);
}
