#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/cuda_device.hpp"
#include "model/cuda_gemm.hpp"
#include "model/kernels.hpp"
#include "model/sampling.hpp"

using namespace sluice;
using namespace sluice::model;

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
}
