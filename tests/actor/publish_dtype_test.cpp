// publish_dtype: what the actor hands the publisher. f32 publishes the policy's tensors as they
// are; bf16 publishes each F32 tensor rounded to nearest even, same names and shapes, half the
// bytes; anything else is refused with the offending name.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "actor/publish_dtype.hpp"
#include "format/bf16.hpp"

using namespace sluice;

TEST_SUITE("actor") {
  TEST_CASE("publish_dtype bf16 rounds every F32 tensor, and f32 publishes them as they are") {
    const std::vector<float> a = {1.0f, 1.0f + 0x1p-8f, -3.25f, 0x1p-140f, 65504.0f, -0.0f};
    const std::vector<float> b = {0.02f, -0.017f};
    std::vector<actor::TensorView> in = {
        {"wte", "F32", {2, 3}, reinterpret_cast<const std::uint8_t*>(a.data()), 24},
        {"ln.bias", "F32", {2}, reinterpret_cast<const std::uint8_t*>(b.data()), 8}};
    std::vector<std::uint8_t> storage;

    auto same = actor::tensors_to_publish(in, "f32", storage);
    REQUIRE(same.is_ok());
    REQUIRE(same->size() == 2);
    CHECK((*same)[0].data == in[0].data);
    CHECK((*same)[1].bytes == 8);

    auto out = actor::tensors_to_publish(in, "bf16", storage);
    REQUIRE(out.is_ok());
    REQUIRE(out->size() == 2);
    CHECK(storage.size() == 16);
    const auto& t0 = (*out)[0];
    const auto& t1 = (*out)[1];
    CHECK(t0.name == "wte");
    CHECK(t0.dtype == "BF16");
    CHECK(t0.shape == std::vector<std::uint64_t>{2, 3});
    CHECK(t0.bytes == 12);
    CHECK(t1.name == "ln.bias");
    CHECK(t1.bytes == 4);
    CHECK(t1.data == t0.data + 12);  // laid out one after the other
    for (std::size_t i = 0; i < a.size(); ++i) {
      std::uint16_t h;
      std::memcpy(&h, t0.data + 2 * i, 2);
      CHECK(h == core::bf16_from_f32(a[i]));
    }
    CHECK(core::f32_from_bf16(static_cast<std::uint16_t>(t0.data[2] | t0.data[3] << 8)) ==
          1.0f);  // the tie went to the even neighbour
  }

  TEST_CASE("publish_dtype refuses an unknown dtype and tensors that are not F32") {
    std::vector<std::uint8_t> storage;
    CHECK(actor::check_publish_dtype("fp8").message() ==
          "publish_dtype must be f32 or bf16, not 'fp8'");
    const std::vector<std::uint8_t> bytes(8, 1);
    std::vector<actor::TensorView> in = {{"w", "U8", {8}, bytes.data(), 8}};
    auto r = actor::tensors_to_publish(in, "bf16", storage);
    CHECK(r.status().code() == core::Code::kInvalidArgument);
    CHECK(r.status().message().find("tensor w is U8") != std::string::npos);
    in = {{"w", "F32", {3}, bytes.data(), 8}};  // 3 elements in 8 bytes
    CHECK(actor::tensors_to_publish(in, "bf16", storage).status().code() ==
          core::Code::kInvalidArgument);
    CHECK(actor::tensors_to_publish(in, "f16", storage).status().code() ==
          core::Code::kInvalidArgument);
  }
}
