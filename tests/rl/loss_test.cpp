#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rl/loss.hpp"

using namespace sluice::rl;
using doctest::Approx;

namespace {

// logp values that are multiples of 1/64 (so x +- kStep is exact in float) plus log(ratio).
std::vector<float> plus_log(const std::vector<float>& base, const std::vector<double>& factor) {
  std::vector<float> out(base.size());
  for (std::size_t i = 0; i < base.size(); ++i)
    out[i] = static_cast<float>(base[i] + std::log(factor[i]));
  return out;
}

// The decoupled example of two tests below: proximal = behaviour + log(1.5, 3.0, 0.8), ratios
// against the proximal 1.1, 1.5, 0.5, A = 1, 1, 2, sample weights 1, 0.5 (trajectories of 2 and
// 1 tokens).
struct DecoupledExample {
  TokenLayout layout{{2, 1}};
  std::vector<float> behaviour = {-1.0f, -2.0f, -0.5f};
  std::vector<float> proximal = plus_log(behaviour, {1.5, 3.0, 0.8});
  std::vector<float> now = plus_log(proximal, {1.1, 1.5, 0.5});
  std::vector<float> adv = {1.0f, 1.0f, 2.0f};
  std::vector<float> weights = {1.0f, 0.5f};
  PolicyBatch batch() const {
    return {.logp_new = now,
            .logp_behaviour = behaviour,
            .logp_proximal = proximal,
            .advantages = adv,
            .sample_weights = weights};
  }
};

// Two batches that must give the same surrogate: the same loss and the same gradients.
void check_same_surrogate(const TokenLayout& layout, const PolicyBatch& x, const PolicyBatch& y) {
  auto a = clipped_surrogate(layout, x);
  auto b = clipped_surrogate(layout, y);
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  CHECK(a->loss == Approx(b->loss));
  CHECK(a->grad_logp_new == b->grad_logp_new);
}

}  // namespace

TEST_SUITE("rl.loss") {
  TEST_CASE("token layout: flat trajectories in batch order") {
    TokenLayout layout({2, 0, 3});
    CHECK(layout.trajectories() == 3);
    CHECK(layout.tokens() == 5);
    CHECK(layout.offset(0) == 0);
    CHECK(layout.offset(1) == 2);
    CHECK(layout.offset(2) == 2);
    CHECK(layout.offset(3) == 5);
    auto tokens = broadcast_to_tokens(layout, std::vector<float>{1.5f, 9.0f, -2.0f});
    REQUIRE(tokens.is_ok());
    CHECK(*tokens == std::vector<float>{1.5f, 1.5f, -2.0f, -2.0f, -2.0f});
    CHECK_FALSE(broadcast_to_tokens(layout, std::vector<float>{1.0f}).is_ok());
    CHECK(TokenLayout().tokens() == 0);
  }

  TEST_CASE("GRPO advantages by hand: interleaved groups, equal rewards give zero") {
    // Group 0: rewards 1, 0, 1, 0: mean 0.5, population std 0.5, so A = +-0.5 / 0.5 = +-1.
    // Group 1: rewards 1, 1, 1: all equal, A = 0.
    // Group 2: rewards 0, 0.5, 1: mean 0.5, std sqrt((0.25 + 0 + 0.25) / 3) = 0.4082483,
    //          A = -0.5 / 0.4082483 = -1.2247449, 0, +1.2247449.
    std::vector<double> rewards = {1, 1, 0, 0, 0.5, 1, 1, 1, 0, 1};
    std::vector<std::size_t> groups = {0, 1, 0, 2, 2, 0, 1, 1, 0, 2};
    auto adv = grpo_advantages(rewards, groups, {.scale_by_std = true, .eps = 1e-9});
    REQUIRE(adv.is_ok());
    std::vector<double> expected = {1.0, 0.0, -1.0, -1.2247449, 0.0,
                                    1.0, 0.0, 0.0,  -1.0,       1.2247449};
    REQUIRE(adv->size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i)
      CHECK((*adv)[i] == Approx(expected[i]).epsilon(1e-6));

    auto plain = grpo_advantages(rewards, groups, {.scale_by_std = false});
    REQUIRE(plain.is_ok());
    std::vector<double> centred = {0.5, 0.0, -0.5, -0.5, 0.0, 0.5, 0.0, 0.0, -0.5, 0.5};
    for (std::size_t i = 0; i < centred.size(); ++i)
      CHECK((*plain)[i] == Approx(centred[i]));

    // A lone sample and an all-equal group give exactly zero, never NaN.
    auto lone =
        grpo_advantages(std::vector<double>{0.7, 0.3, 0.3}, std::vector<std::size_t>{4, 9, 9});
    REQUIRE(lone.is_ok());
    CHECK(*lone == std::vector<float>{0.0f, 0.0f, 0.0f});

    CHECK_FALSE(grpo_advantages(rewards, std::vector<std::size_t>{0, 1}).is_ok());
    CHECK_FALSE(grpo_advantages(rewards, groups, {.eps = 0.0}).is_ok());
  }

  TEST_CASE("group ids from prompt ids") {
    std::vector<std::string> keys = {"p7", "p3", "p7", "p9", "p3"};
    CHECK(group_ids(keys) == std::vector<std::size_t>{0, 1, 0, 2, 1});
  }

  TEST_CASE("GAE by hand on a 3-step trajectory") {
    // gamma 0.9, lambda 0.8, values 0.5 0.6 0.7, reward 1 on the last token, V after the end 0:
    //   delta2 = 1 + 0 - 0.7 = 0.3                     A2 = 0.3
    //   delta1 = 0 + 0.9 * 0.7 - 0.6 = 0.03            A1 = 0.03 + 0.72 * 0.3 = 0.246
    //   delta0 = 0 + 0.9 * 0.6 - 0.5 = 0.04            A0 = 0.04 + 0.72 * 0.246 = 0.21712
    //   returns = A + V = 0.71712, 0.846, 1.0
    // and a 1-token trajectory, value 0.2, reward 0: A = 0 - 0.2 = -0.2, return 0.
    TokenLayout layout({3, 1});
    std::vector<float> values = {0.5f, 0.6f, 0.7f, 0.2f};
    std::vector<double> rewards = {1.0, 0.0};
    auto r = gae(layout, values, rewards, {.gamma = 0.9, .lambda = 0.8, .normalize = false});
    REQUIRE(r.is_ok());
    std::vector<double> adv = {0.21712, 0.246, 0.3, -0.2};
    std::vector<double> ret = {0.71712, 0.846, 1.0, 0.0};
    for (std::size_t i = 0; i < 4; ++i) {
      CHECK(r->advantages[i] == Approx(adv[i]).epsilon(1e-6));
      CHECK(r->returns[i] == Approx(ret[i]).epsilon(1e-6));
    }

    // Normalised: mean 0 and std 1 over the batch; the returns are unchanged.
    auto n = gae(layout, values, rewards, {.gamma = 0.9, .lambda = 0.8, .normalize = true});
    REQUIRE(n.is_ok());
    double mean = 0.0;
    double sq = 0.0;
    for (float a : n->advantages)
      mean += a / 4.0;
    for (float a : n->advantages)
      sq += (a - mean) * (a - mean) / 4.0;
    CHECK(mean == Approx(0.0).epsilon(1e-6));
    CHECK(std::sqrt(sq) == Approx(1.0).epsilon(1e-5));
    CHECK(n->returns == r->returns);
    // Order is kept: the largest raw advantage is still the largest.
    CHECK(n->advantages[2] > n->advantages[1]);
    CHECK(n->advantages[3] < n->advantages[0]);

    // gamma = lambda = 1: every advantage is reward - value.
    auto mc = gae(layout, values, rewards, {.gamma = 1.0, .lambda = 1.0, .normalize = false});
    REQUIRE(mc.is_ok());
    CHECK(mc->advantages[0] == Approx(0.5));
    CHECK(mc->advantages[1] == Approx(0.4));
    CHECK(mc->returns[0] == Approx(1.0));

    CHECK_FALSE(gae(layout, std::vector<float>{0.5f}, rewards).is_ok());
    CHECK_FALSE(gae(layout, values, std::vector<double>{1.0}).is_ok());
    CHECK_FALSE(gae(layout, values, rewards, {.gamma = 1.5}).is_ok());
  }

  TEST_CASE("the clipped surrogate by hand, behaviour policy as the proximal") {
    // Two trajectories of 2 and 1 tokens, sample weights 1 and 0.5, clip 0.2.
    //   token 0: ratio 1.1, A = +1: min(1.1, 1.1) = 1.1     unclipped, grad -(1/3) 1.1 = -0.366667
    //   token 1: ratio 1.5, A = +1: min(1.5, 1.2) = 1.2     clipped, grad 0
    //   token 2: ratio 0.5, A = +2: min(1.0, 1.6) = 1.0     unclipped, grad -(1/3) 0.5 * 0.5 * 2
    //                                                        = -0.166667
    //   loss = -(1/3) (1 * (1.1 + 1.2) + 0.5 * 1.0) = -0.933333
    //   approx KL = mean of (r - 1) - ln r = (0.0046898 + 0.0945349 + 0.1931472) / 3 = 0.0974573
    TokenLayout layout({2, 1});
    std::vector<float> behaviour = {-1.0f, -2.0f, -0.5f};
    std::vector<float> now = plus_log(behaviour, {1.1, 1.5, 0.5});
    std::vector<float> adv = {1.0f, 1.0f, 2.0f};
    std::vector<float> weights = {1.0f, 0.5f};
    PolicyBatch batch{
        .logp_new = now, .logp_behaviour = behaviour, .advantages = adv, .sample_weights = weights};
    auto r = clipped_surrogate(layout, batch, {.clip_low = 0.2, .clip_high = 0.2});
    REQUIRE(r.is_ok());
    CHECK(r->loss == Approx(-0.933333).epsilon(1e-5));
    REQUIRE(r->grad_logp_new.size() == 3);
    CHECK(r->grad_logp_new[0] == Approx(-0.366667).epsilon(1e-5));
    CHECK(r->grad_logp_new[1] == 0.0f);
    CHECK(r->grad_logp_new[2] == Approx(-0.166667).epsilon(1e-5));
    CHECK(r->stats.tokens == 3);
    CHECK(r->stats.clip_fraction == Approx(1.0 / 3.0));
    CHECK(r->stats.mean_ratio == Approx(1.033333).epsilon(1e-5));
    CHECK(r->stats.approx_kl == Approx(0.0974573).epsilon(1e-5));
    CHECK(r->stats.mean_behaviour_weight == 1.0);
    CHECK(r->stats.truncated_fraction == 0.0);

    // A negative advantage: the pessimistic bound clips a ratio that fell below 1 - eps.
    //   ratio 0.5, A = -2: min(-1.0, -1.6) = -1.6, clipped; loss = 1.6, grad 0.
    TokenLayout one({1});
    std::vector<float> b1 = {-1.0f};
    std::vector<float> n1 = plus_log(b1, {0.5});
    std::vector<float> a1 = {-2.0f};
    auto neg = clipped_surrogate(one, {.logp_new = n1, .logp_behaviour = b1, .advantages = a1});
    REQUIRE(neg.is_ok());
    CHECK(neg->loss == Approx(1.6));
    CHECK(neg->grad_logp_new[0] == 0.0f);
    CHECK(neg->stats.clip_fraction == 1.0);
  }

  TEST_CASE("the decoupled surrogate by hand: behaviour weights, truncated at the cap") {
    // Proximal = behaviour + log(1.5, 3.0, 0.8); cap 2, so w = 1.5, 2.0 (truncated), 0.8.
    // Ratios against the proximal as before: 1.1, 1.5, 0.5 with A = 1, 1, 2, weights 1, 0.5.
    //   loss = -(1/3) (1.5 * 1.1 + 2.0 * 1.2 + 0.5 * 0.8 * 1.0) = -(1/3) 4.45 = -1.483333
    //   grads: -(1/3) 1.5 * 1.1 = -0.55, 0, -(1/3) 0.5 * 0.8 * 0.5 * 2 = -0.133333
    const DecoupledExample ex;
    const TokenLayout& layout = ex.layout;
    const PolicyBatch batch = ex.batch();
    auto r = clipped_surrogate(layout, batch, {.behaviour_cap = 2.0});
    REQUIRE(r.is_ok());
    CHECK(r->loss == Approx(-1.483333).epsilon(1e-5));
    CHECK(r->grad_logp_new[0] == Approx(-0.55).epsilon(1e-5));
    CHECK(r->grad_logp_new[1] == 0.0f);
    CHECK(r->grad_logp_new[2] == Approx(-0.133333).epsilon(1e-5));
    CHECK(r->stats.mean_behaviour_weight == Approx(4.3 / 3.0).epsilon(1e-5));
    CHECK(r->stats.truncated_fraction == Approx(1.0 / 3.0));
    CHECK(r->stats.mean_ratio == Approx(1.033333).epsilon(1e-5));

    // Proximal equal to behaviour is the same as no proximal at all.
    PolicyBatch same = batch;
    same.logp_proximal = ex.behaviour;
    PolicyBatch absent = batch;
    absent.logp_proximal = {};
    check_same_surrogate(layout, same, absent);
  }

  TEST_CASE("a token mask: masked tokens give no loss and no gradient, N still counts them") {
    // The decoupled example above with the cap lifted (w = 1.5, 3.0, 0.8) and token 1 masked:
    //   loss = -(1/3) (1.5 * 1.1 + 0.5 * 0.8 * 1.0) = -(1/3) 2.05 = -0.683333
    // Token 1 would have been clipped (ratio 1.5, A > 0); masked, it is not counted as clipped.
    const DecoupledExample ex;
    const TokenLayout& layout = ex.layout;
    std::vector<std::uint8_t> mask = {1, 0, 1};
    PolicyBatch batch = ex.batch();
    batch.token_mask = mask;
    auto r = clipped_surrogate(layout, batch, {.behaviour_cap = INFINITY});
    REQUIRE(r.is_ok());
    CHECK(r->loss == Approx(-0.683333).epsilon(1e-5));
    CHECK(r->grad_logp_new[0] == Approx(-0.55).epsilon(1e-5));
    CHECK(r->grad_logp_new[1] == 0.0f);
    CHECK(r->grad_logp_new[2] == Approx(-0.133333).epsilon(1e-5));
    CHECK(r->stats.masked_fraction == Approx(1.0 / 3.0));
    CHECK(r->stats.clip_fraction == 0.0);
    CHECK(r->stats.truncated_fraction == 0.0);

    // All kept is the same as no mask.
    std::vector<std::uint8_t> ones = {1, 1, 1};
    PolicyBatch kept = batch;
    kept.token_mask = ones;
    PolicyBatch none = batch;
    none.token_mask = {};
    check_same_surrogate(layout, kept, none);
    CHECK(clipped_surrogate(layout, kept)->stats.masked_fraction == 0.0);

    std::vector<std::uint8_t> two = {1, 1};
    PolicyBatch bad = batch;
    bad.token_mask = two;
    auto e = clipped_surrogate(layout, bad);
    REQUIRE_FALSE(e.is_ok());
    CHECK(e.status().message().find("token_mask has 2 entries") != std::string::npos);
  }

  TEST_CASE("M2PO's second-moment mask by hand: the largest (log w)^2 go first") {
    // (log w)^2 = 1/64, 1, 0, 1/4, 1/16 (exact in float and double). Over all five the mean is
    // 1.328125 / 5 = 0.266 > 0.04: mask the 1 (0.328125 / 4 = 0.082, still over), then the 1/4
    // (0.078125 / 3 = 0.026 <= 0.04): kept are tokens 0, 2 and 4.
    std::vector<float> log_w = {0.125f, -1.0f, 0.0f, 0.5f, -0.25f};
    auto m = second_moment_mask(log_w, 0.04);
    REQUIRE(m.is_ok());
    CHECK(*m == std::vector<std::uint8_t>{1, 0, 1, 0, 1});
    // A looser bound keeps more: 0.082 is under 0.1, so only the 1 goes.
    CHECK(*second_moment_mask(log_w, 0.1) == std::vector<std::uint8_t>{1, 0, 1, 1, 1});
    // The sign of log w does not matter, only its square.
    std::vector<float> flipped = {-0.125f, 1.0f, 0.0f, -0.5f, 0.25f};
    CHECK(*second_moment_mask(flipped, 0.04) == *m);
  }

  TEST_CASE("M2PO's mask at the threshold's edge: a mean equal to it is kept") {
    // (log w)^2 = 1/4, 1/4, 0, 0: the mean is exactly 1/8.
    std::vector<float> log_w = {0.5f, -0.5f, 0.0f, 0.0f};
    CHECK(*second_moment_mask(log_w, 0.125) == std::vector<std::uint8_t>{1, 1, 1, 1});
    // Just under: one of the equal largest goes, the later one (1/4 / 3 = 0.083 <= 0.1249).
    CHECK(*second_moment_mask(log_w, 0.1249) == std::vector<std::uint8_t>{1, 0, 1, 1});
    // 1/12 exactly would keep three; just under it keeps the two zeros only.
    CHECK(*second_moment_mask(log_w, 0.0833) == std::vector<std::uint8_t>{0, 0, 1, 1});
    // Threshold 0 keeps exactly the tokens with log w = 0.
    CHECK(*second_moment_mask(log_w, 0.0) == std::vector<std::uint8_t>{0, 0, 1, 1});
  }

  TEST_CASE("M2PO's mask: nothing masked when already under, or on-policy: all when all over") {
    std::vector<float> under = {0.125f, -0.125f, 0.0f, 0.0625f};  // mean (log w)^2 < 0.01
    CHECK(*second_moment_mask(under, 0.04) == std::vector<std::uint8_t>{1, 1, 1, 1});
    // On-policy: proximal = behaviour, log w = 0 everywhere; nothing is masked at any threshold.
    std::vector<float> on_policy(7, 0.0f);
    CHECK(*second_moment_mask(on_policy, 0.04) == std::vector<std::uint8_t>(7, 1));
    CHECK(*second_moment_mask(on_policy, 0.0) == std::vector<std::uint8_t>(7, 1));
    // Every (log w)^2 over the threshold: no prefix is under it, every token is masked.
    std::vector<float> over = {1.0f, -1.0f, 0.5f};
    CHECK(*second_moment_mask(over, 0.04) == std::vector<std::uint8_t>{0, 0, 0});
    // An empty batch gives an empty mask.
    auto empty = second_moment_mask({}, 0.04);
    REQUIRE(empty.is_ok());
    CHECK(empty->empty());
  }

  TEST_CASE("M2PO's mask: a negative threshold or a non-finite log w is an error") {
    std::vector<float> ok = {0.0f};
    CHECK(second_moment_mask(ok, -0.01).status().message().find("threshold") != std::string::npos);
    CHECK_FALSE(second_moment_mask(ok, NAN).is_ok());
    std::vector<float> bad = {0.0f, INFINITY};
    auto r = second_moment_mask(bad, 0.04);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("log_w[1]") != std::string::npos);
  }

  TEST_CASE("dL/dlogp_new matches central finite differences") {
    // 4 trajectories, 10 tokens; log-probs are multiples of 1/64 so logp +- h is exact in float,
    // ratios are kept away from the clip boundaries 0.8 and 1.2 (where the loss has kinks).
    TokenLayout layout({3, 1, 4, 2});
    const std::size_t n = layout.tokens();
    const std::vector<double> log_ratio = {-0.5, -0.3, -0.1, 0.1, 0.3, 0.5};
    std::vector<float> behaviour(n), proximal(n), now(n), adv(n);
    for (std::size_t i = 0; i < n; ++i) {
      behaviour[i] = -1.0f - static_cast<float>(i * 7 % 11) / 16.0f;
      proximal[i] = behaviour[i] + static_cast<float>(static_cast<int>(i * 5 % 9) - 4) / 16.0f;
      now[i] = proximal[i] + static_cast<float>(log_ratio[i * 5 % 6]);
      now[i] = std::round(now[i] * 64.0f) / 64.0f;
      adv[i] = (i % 3 == 0 ? -1.0f : 1.0f) * (0.5f + static_cast<float>(i) / 8.0f);
    }
    std::vector<float> weights = {1.0f, 0.5f, 0.25f, 2.0f};
    SurrogateOptions options{.clip_low = 0.2, .clip_high = 0.28, .behaviour_cap = 1.2};
    auto loss_at = [&](const std::vector<float>& lp) {
      PolicyBatch b{.logp_new = lp,
                    .logp_behaviour = behaviour,
                    .logp_proximal = proximal,
                    .advantages = adv,
                    .sample_weights = weights};
      return clipped_surrogate(layout, b, options).value();
    };
    SurrogateResult at = loss_at(now);
    // Both branches of the min and the truncation are exercised.
    CHECK(at.stats.clip_fraction > 0.0);
    CHECK(at.stats.clip_fraction < 1.0);
    CHECK(at.stats.truncated_fraction > 0.0);
    const float h = 1.0f / 1024.0f;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<float> up = now;
      std::vector<float> down = now;
      up[i] += h;
      down[i] -= h;
      double fd = (loss_at(up).loss - loss_at(down).loss) / (2.0 * h);
      CHECK_MESSAGE(at.grad_logp_new[i] == Approx(fd).epsilon(1e-4).scale(1e-3), "token " << i);
    }
  }

  TEST_CASE("the value loss by hand, with and without clipping") {
    // V = 1, 2; R = 0.5, 3; old = 1.2, 1.0; clip 0.5.
    //   token 0: 0.5 (0.5)^2 = 0.125; Vc = 1.2 + clamp(-0.2) = 1.0, the same; grad 0.5 / 2 = 0.25
    //   token 1: 0.5 (1)^2 = 0.5; Vc = 1.0 + clamp(1.0) = 1.5, 0.5 (1.5)^2 = 1.125 is larger:
    //            clipped, grad 0
    //   loss = (0.125 + 1.125) / 2 = 0.625; without clipping (0.125 + 0.5) / 2 = 0.3125 and
    //   grads (V - R) / N = 0.25, -0.5.
    std::vector<float> v = {1.0f, 2.0f};
    std::vector<float> ret = {0.5f, 3.0f};
    std::vector<float> old = {1.2f, 1.0f};
    auto c = value_loss(v, ret, old, {.clip = 0.5});
    REQUIRE(c.is_ok());
    CHECK(c->loss == Approx(0.625));
    CHECK(c->grad_values[0] == Approx(0.25));
    CHECK(c->grad_values[1] == 0.0f);
    CHECK(c->clip_fraction == 0.5);

    auto u = value_loss(v, ret);
    REQUIRE(u.is_ok());
    CHECK(u->loss == Approx(0.3125));
    CHECK(u->grad_values[0] == Approx(0.25));
    CHECK(u->grad_values[1] == Approx(-0.5));
    CHECK(u->clip_fraction == 0.0);

    // Finite differences of the clipped loss away from its kinks.
    std::vector<float> vs = {1.0f, 2.0f, 0.25f, -0.5f};
    std::vector<float> rs = {0.5f, 3.0f, 0.75f, 0.0f};
    std::vector<float> os = {1.25f, 1.0f, 0.0f, -0.25f};
    auto at = value_loss(vs, rs, os, {.clip = 0.5}).value();
    const float h = 1.0f / 1024.0f;
    for (std::size_t i = 0; i < vs.size(); ++i) {
      auto up = vs;
      auto down = vs;
      up[i] += h;
      down[i] -= h;
      double fd = (value_loss(up, rs, os, {.clip = 0.5})->loss -
                   value_loss(down, rs, os, {.clip = 0.5})->loss) /
                  (2.0 * h);
      CHECK_MESSAGE(at.grad_values[i] == Approx(fd).epsilon(1e-4).scale(1e-3), "token " << i);
    }

    CHECK_FALSE(value_loss(v, std::vector<float>{1.0f}).is_ok());
    CHECK_FALSE(value_loss(v, ret, {}, {.clip = 0.5}).is_ok());  // clipping needs old values
    CHECK_FALSE(value_loss({}, {}).is_ok());
  }

  TEST_CASE("wrong sizes and options are errors that name the input") {
    TokenLayout layout({2, 1});
    std::vector<float> three = {-1.0f, -1.0f, -1.0f};
    std::vector<float> two = {-1.0f, -1.0f};
    auto r =
        clipped_surrogate(layout, {.logp_new = three, .logp_behaviour = two, .advantages = three});
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("logp_behaviour has 2 entries") != std::string::npos);
    auto w = clipped_surrogate(
        layout,
        {.logp_new = three, .logp_behaviour = three, .advantages = three, .sample_weights = three});
    CHECK(w.status().message().find("sample_weights") != std::string::npos);
    auto empty = clipped_surrogate(TokenLayout({0}), {});
    CHECK(empty.status().message().find("no response tokens") != std::string::npos);
    auto opt =
        clipped_surrogate(layout, {.logp_new = three, .logp_behaviour = three, .advantages = three},
                          {.clip_low = 1.5});
    CHECK(opt.status().message().find("clip_low") != std::string::npos);
  }
}
