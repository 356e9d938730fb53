#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/cuda_device.hpp"
#include "model/cuda_gemm.hpp"
#include "model/device.hpp"
#include "model/gpt.hpp"
#include "model/kernels.hpp"
#include "model/sampling.hpp"
#include "test_util.hpp"

using namespace sluice;
using namespace sluice::model;
using sluice::model::testing::make_model;
using sluice::model::testing::perturb_and_batch;
using sluice::model::testing::tiny_config;
using sluice::model::testing::WeightedBatch;

namespace {

// Puts the products on `device` for its lifetime and back on the CPU after, also when a REQUIRE
// throws out of the test: the choice is process-wide and the other suites expect the CPU.
class DeviceScope {
 public:
  explicit DeviceScope(Device device) : status_(use_device(device)) {}
  ~DeviceScope() { use_device(Device::kCpu).ignore(); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const core::Status& status() const { return status_; }

 private:
  core::Status status_;
};

struct Pass {
  double loss = 0.0;
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<float>> values;
  std::vector<float> grads;
};

// L = sum wl * logprob + sum wv * value (in double) and dL/dparams from zeroed gradients.
Pass forward_backward(Gpt& m, const std::vector<std::vector<std::int32_t>>& seqs,
                      const std::vector<std::vector<float>>& wl,
                      const std::vector<std::vector<float>>& wv) {
  Pass p;
  m.zero_grad();
  auto out = m.forward(seqs);
  REQUIRE_MESSAGE(out.is_ok(), out.status().to_string());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    for (std::size_t t = 0; t < wl[i].size(); ++t)
      p.loss += static_cast<double>(wl[i][t]) * out->logprobs[i][t];
    for (std::size_t t = 0; t < wv[i].size(); ++t)
      p.loss += static_cast<double>(wv[i][t]) * out->values[i][t];
  }
  core::Status s = m.backward(wl, wv);
  REQUIRE_MESSAGE(s.is_ok(), s.to_string());
  p.logprobs = std::move(out->logprobs);
  p.values = std::move(out->values);
  p.grads.assign(m.grads(), m.grads() + m.param_count());
  return p;
}

// Greedy tokens after `prompt`, with the KV cache: prefill, then one-sequence decodes.
std::vector<std::int32_t> greedy(Gpt& m, const std::vector<std::int32_t>& prompt, int n) {
  std::vector<std::int32_t> out;
  KvCache cache = m.make_cache();
  std::vector<float> logits;
  REQUIRE(m.prefill(cache, prompt, logits).is_ok());
  std::uint64_t rng = 0;
  for (int i = 0; i < n; ++i) {
    auto s = sample(logits, 0.0f, rng);
    REQUIRE(s.is_ok());
    out.push_back(s->token);
    if (i + 1 == n) break;
    KvCache* c = &cache;
    REQUIRE(m.decode(std::span<KvCache* const>(&c, 1), std::span<const std::int32_t>(&s->token, 1),
                     logits)
                .is_ok());
  }
  return out;
}

}  // namespace

TEST_SUITE("model.cuda") {
  TEST_CASE("cuBLAS sgemm equals OpenBLAS sgemm (skipped without a GPU)") {
    auto devs = core::cuda_devices();
    if (devs.count == 0) {
      MESSAGE("skipped: no CUDA device (" << devs.why_none << ")");
      CHECK(CublasGemm::create().status().code() == core::Code::kFailedPrecondition);
      CHECK(DeviceBuffer::create(16).status().code() == core::Code::kFailedPrecondition);
      return;
    }
    auto gemm = CublasGemm::create();
    REQUIRE_MESSAGE(gemm.is_ok(), gemm.status().to_string());
    std::uint64_t rng = 17;
    const int m = 37, n = 29, k = 53;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        CAPTURE(ta);
        CAPTURE(tb);
        // Leading dimensions wider than the rows, to check they are honoured.
        const int lda = (ta ? m : k) + 3;
        const int ldb = (tb ? k : n) + 1;
        const int ldc = n + 2;
        std::vector<float> a(static_cast<std::size_t>((ta ? k : m) * lda));
        std::vector<float> b(static_cast<std::size_t>((tb ? n : k) * ldb));
        std::vector<float> c(static_cast<std::size_t>(m * ldc));
        for (auto* v : {&a, &b, &c}) {
          for (auto& x : *v)
            x = static_cast<float>(next_uniform(rng) * 2.0 - 1.0);
        }
        std::vector<float> expect = c;
        kernels::sgemm(ta, tb, m, n, k, 0.75f, a.data(), lda, b.data(), ldb, 0.5f, expect.data(),
                       ldc);
        auto da = DeviceBuffer::create(a.size());
        auto db = DeviceBuffer::create(b.size());
        auto dc = DeviceBuffer::create(c.size());
        REQUIRE((da.is_ok() && db.is_ok() && dc.is_ok()));
        REQUIRE((*da)->upload(a).is_ok());
        REQUIRE((*db)->upload(b).is_ok());
        REQUIRE((*dc)->upload(c).is_ok());
        core::Status s =
            (*gemm)->sgemm(ta, tb, m, n, k, 0.75f, **da, lda, **db, ldb, 0.5f, **dc, ldc);
        REQUIRE_MESSAGE(s.is_ok(), s.to_string());
        std::vector<float> got(c.size());
        REQUIRE((*dc)->download(got).is_ok());
        for (std::size_t i = 0; i < got.size(); ++i)
          CHECK(got[i] == doctest::Approx(expect[i]).epsilon(1e-4));
      }
    }
    // A buffer too small for the shape is refused, not overrun.
    auto small = DeviceBuffer::create(8);
    REQUIRE(small.is_ok());
    CHECK((*gemm)
              ->sgemm(false, false, 4, 4, 4, 1.0f, **small, 4, **small, 4, 0.0f, **small, 4)
              .code() == core::Code::kInvalidArgument);
  }

  TEST_CASE("parse_device takes cpu and cuda and names anything else") {
    REQUIRE(parse_device("cpu").is_ok());
    CHECK(*parse_device("cpu") == Device::kCpu);
    REQUIRE(parse_device("cuda").is_ok());
    CHECK(*parse_device("cuda") == Device::kCuda);
    for (const char* bad : {"gpu0", "", "CUDA", "cuda:0"}) {
      CAPTURE(bad);
      auto r = parse_device(bad);
      REQUIRE_FALSE(r.is_ok());
      CHECK(r.status().code() == core::Code::kInvalidArgument);
      CHECK(r.status().message().find("'" + std::string(bad) + "'") != std::string::npos);
    }
    CHECK(device_name(Device::kCuda) == "cuda");
    CHECK(current_device() == Device::kCpu);
  }

  TEST_CASE("use_device(cuda) without a GPU fails, says why and leaves the CPU in charge") {
    auto devs = core::cuda_devices();
    if (devs.count > 0) {
      MESSAGE("skipped: there is a CUDA device (the GPU tests below use it)");
      return;
    }
    REQUIRE(current_device() == Device::kCpu);
    core::Status s = use_device(Device::kCuda);
    CHECK(s.code() == core::Code::kFailedPrecondition);
    INFO(s.to_string());
    if (detail::cuda_built()) {
      CHECK(s.message().find("no CUDA device") != std::string::npos);
      CHECK(s.message().find(devs.why_none) != std::string::npos);
    } else {
      CHECK(s.message().find("built without CUDA") != std::string::npos);
    }
    CHECK(current_device() == Device::kCpu);
    CHECK(use_device(Device::kCpu).is_ok());
    CHECK(current_device() == Device::kCpu);
  }

  TEST_CASE("kernels::sgemm on cuda equals the CPU for every transpose (skipped without a GPU)") {
    auto devs = core::cuda_devices();
    if (devs.count == 0) {
      MESSAGE("skipped: no CUDA device (" << devs.why_none << ")");
      return;
    }
    std::uint64_t rng = 23;
    const float kGap = 12345.0f;  // between rows of C: no product may touch it
    const float kNan = std::numeric_limits<float>::quiet_NaN();
    struct Case {
      int m = 0, n = 0, k = 0;
      bool ta = false, tb = false;
      float beta = 0.0f;
      int lda = 0, ldb = 0, ldc = 0;
      std::vector<float> a{}, b{}, c{}, expect{}, got{};
    };
    // A small shape, then a larger one (the device scratch grows), then the small one again;
    // every transpose, beta 0.5 and beta 0 (C then holds NaN, which must not propagate).
    std::vector<Case> cases;
    for (auto [m, n, k] : {std::array{5, 3, 7}, std::array{37, 29, 53}, std::array{5, 3, 7}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (float beta : {0.5f, 0.0f}) {
            Case x{.m = m,
                   .n = n,
                   .k = k,
                   .ta = ta,
                   .tb = tb,
                   .beta = beta,
                   .lda = (ta ? m : k) + 3,
                   .ldb = (tb ? k : n) + 1,
                   .ldc = n + 2};
            // Exactly (rows - 1) x ld + cols floats: the last row is not padded, as for a view
            // at the end of a buffer.
            x.a.resize(detail::operand_floats(ta ? k : m, ta ? m : k, x.lda));
            x.b.resize(detail::operand_floats(tb ? n : k, tb ? k : n, x.ldb));
            x.c.assign(detail::operand_floats(m, n, x.ldc), kGap);
            for (auto* v : {&x.a, &x.b})
              for (auto& f : *v)
                f = static_cast<float>(next_uniform(rng) * 2.0 - 1.0);
            for (int r = 0; r < m; ++r)
              for (int j = 0; j < n; ++j)
                x.c[static_cast<std::size_t>(r) * x.ldc + j] =
                    beta == 0.0f ? kNan : static_cast<float>(next_uniform(rng) * 2.0 - 1.0);
            x.expect = x.c;
            x.got = x.c;
            cases.push_back(std::move(x));
          }
        }
      }
    }
    auto run = [](Case& x, std::vector<float>& out) {
      kernels::sgemm(x.ta, x.tb, x.m, x.n, x.k, 0.75f, x.a.data(), x.lda, x.b.data(), x.ldb, x.beta,
                     out.data(), x.ldc);
    };
    REQUIRE(current_device() == Device::kCpu);
    for (Case& x : cases)
      run(x, x.expect);
    {
      DeviceScope on_cuda(Device::kCuda);
      REQUIRE_MESSAGE(on_cuda.status().is_ok(), on_cuda.status().to_string());
      for (Case& x : cases)
        run(x, x.got);
    }
    CHECK(current_device() == Device::kCpu);
    for (const Case& x : cases) {
      CAPTURE(x.m);
      CAPTURE(x.ta);
      CAPTURE(x.tb);
      CAPTURE(x.beta);
      for (std::size_t i = 0; i < x.got.size(); ++i) {
        if (static_cast<int>(i % static_cast<std::size_t>(x.ldc)) >= x.n) {
          CHECK(x.got[i] == kGap);
        } else {
          CHECK(std::isfinite(x.got[i]));
          CHECK(x.got[i] == doctest::Approx(x.expect[i]).epsilon(1e-4));
        }
      }
    }
  }

  TEST_CASE("a GPT on cuda trains and generates as on the CPU (skipped without a GPU)") {
    auto devs = core::cuda_devices();
    if (devs.count == 0) {
      MESSAGE("skipped: no CUDA device (" << devs.why_none << ")");
      return;
    }
    GptConfig cfg = tiny_config(true);
    auto m = make_model(cfg);
    REQUIRE(m);
    std::uint64_t rng = 31;
    WeightedBatch b = perturb_and_batch(*m, cfg.vocab, rng);
    const auto& seqs = b.seqs;
    const auto& wl = b.wl;
    const auto& wv = b.wv;
    const std::vector<std::vector<std::int32_t>> prompts = {{3, 1, 4, 1}, {2, 7}, {9}};
    const int kNewTokens = 7;  // the longest prompt plus these stay within the context (12)

    REQUIRE(current_device() == Device::kCpu);
    Pass cpu = forward_backward(*m, seqs, wl, wv);
    std::vector<std::vector<std::int32_t>> cpu_tokens;
    for (const auto& prompt : prompts)
      cpu_tokens.push_back(greedy(*m, prompt, kNewTokens));

    Pass gpu;
    std::vector<std::vector<std::int32_t>> gpu_tokens;
    {
      DeviceScope on_cuda(Device::kCuda);
      REQUIRE_MESSAGE(on_cuda.status().is_ok(), on_cuda.status().to_string());
      REQUIRE(current_device() == Device::kCuda);
      gpu = forward_backward(*m, seqs, wl, wv);
      for (const auto& prompt : prompts)
        gpu_tokens.push_back(greedy(*m, prompt, kNewTokens));
    }
    CHECK(current_device() == Device::kCpu);

    CHECK(gpu.loss == doctest::Approx(cpu.loss).epsilon(1e-4));
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      for (std::size_t t = 0; t < cpu.logprobs[i].size(); ++t)
        CHECK(gpu.logprobs[i][t] == doctest::Approx(cpu.logprobs[i][t]).epsilon(1e-4));
      for (std::size_t t = 0; t < cpu.values[i].size(); ++t)
        CHECK(gpu.values[i][t] == doctest::Approx(cpu.values[i][t]).epsilon(1e-4));
    }
    REQUIRE(gpu.grads.size() == cpu.grads.size());
    std::size_t bad = 0;
    double worst = 0.0;
    for (std::size_t i = 0; i < cpu.grads.size(); ++i) {
      const double diff = std::abs(static_cast<double>(gpu.grads[i]) - cpu.grads[i]);
      const double allowed = std::max(1e-3 * std::abs(static_cast<double>(cpu.grads[i])), 1e-5);
      worst = std::max(worst, diff / allowed);
      if (!(diff <= allowed)) ++bad;
    }
    INFO("gradients out of tolerance: " << bad << " of " << cpu.grads.size() << ", worst at "
                                        << worst << " x the tolerance");
    CHECK(bad == 0);
    CHECK(gpu_tokens == cpu_tokens);
  }
}
