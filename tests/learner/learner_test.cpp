#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <unistd.h>

#include "actor/learner.hpp"
#include "core/config.hpp"
#include "rl/tokenizer.hpp"

using namespace sluice;
using sluice::actor::Learner;
using sluice::actor::LearnerConfig;
using sluice::actor::Sample;

namespace {

// A model and a task small enough that every test runs in a second or two, also under
// AddressSanitizer: sums of two one-digit numbers ("3+5=" -> "8$").
LearnerConfig small_config() {
  LearnerConfig c;
  c.gpt.vocab = rl::Tokenizer::kVocabSize;
  c.gpt.context = 16;
  c.gpt.d_model = 32;
  c.gpt.n_layer = 2;
  c.gpt.n_head = 2;
  c.gpt.d_ff = 64;
  c.task.min_terms = 2;
  c.task.max_terms = 2;
  c.task.median_terms = 2.0;
  c.task.p99_terms = 2.0;
  c.task.context_tokens = 16;
  c.warmstart_steps = 0;
  c.warmstart_batch = 32;
  c.warmstart_lr = 3e-3f;
  c.minibatch = 3;  // odd, so batches span several minibatches
  c.eval_prompts = 40;
  c.eval_max_new_tokens = 6;
  return c;
}

std::unique_ptr<Learner> make(const LearnerConfig& c) {
  auto l = Learner::create(c);
  REQUIRE_MESSAGE(l.is_ok(), l.status().to_string());
  return std::move(l).value();
}

// A trajectory answering the index-th training prompt with `response`, its behaviour log-probs
// set to the learner's own (on-policy).
rl::Trajectory trajectory(Learner& l, std::uint64_t index, const std::string& response,
                          double reward, const std::string& id) {
  auto p = l.task().train_prompt(index);
  REQUIRE(p.is_ok());
  rl::Trajectory t;
  t.id = id;
  t.prompt_id = p->id;
  t.prompt_tokens = p->tokens;
  auto r = rl::Tokenizer::encode(response);
  REQUIRE(r.is_ok());
  t.response_tokens = *r;
  t.reward = reward;
  auto lp = l.response_logprobs({t});
  REQUIRE_MESSAGE(lp.is_ok(), lp.status().to_string());
  t.logprobs = (*lp)[0];
  return t;
}

std::string gold(Learner& l, std::uint64_t index) {
  auto p = l.task().train_prompt(index);
  REQUIRE(p.is_ok());
  return rl::Tokenizer::decode(l.task().solution(*p));
}

// A wrong answer to the index-th prompt (well formed: one number, then EOS).
std::string wrong(Learner& l, std::uint64_t index) {
  auto p = l.task().train_prompt(index);
  REQUIRE(p.is_ok());
  return std::to_string(p->answer() + 1) + "$";
}

double sum(const std::vector<float>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0);
}

std::vector<float> params(const Learner& l) {
  return {l.model().params(), l.model().params() + l.model().param_count()};
}

// How far the parameters moved from `before` (L1).
double moved(const std::vector<float>& before, const std::vector<float>& after) {
  double d = 0.0;
  for (std::size_t i = 0; i < before.size(); ++i)
    d += std::abs(after[i] - before[i]);
  return d;
}

}  // namespace

TEST_SUITE("learner") {
  TEST_CASE("warm start lowers the SFT loss and answers some held-out prompts") {
    LearnerConfig c = small_config();
    c.warmstart_steps = 150;
    auto l = make(c);
    auto before = l->evaluate();
    REQUIRE(before.is_ok());
    CHECK(before->prompts == 40);
    std::uint32_t calls = 0;
    auto ws = l->warm_start([&](std::uint32_t step, float loss) {
      ++calls;
      CHECK(step == calls);
      CHECK(std::isfinite(loss));
    });
    REQUIRE_MESSAGE(ws.is_ok(), ws.status().to_string());
    CHECK(calls == 150);
    CHECK(ws->steps == 150);
    // Uniform guessing over 20 tokens costs log(20) = 3 nats per token.
    CHECK(ws->first_loss > 2.0f);
    CHECK(ws->last_loss < 0.5f * ws->first_loss);
    CHECK(l->steps() == 0);  // the warm start is not an RL step
    auto after = l->evaluate();
    REQUIRE(after.is_ok());
    MESSAGE("held-out accuracy " << before->accuracy << " -> " << after->accuracy
                                 << ", mean response tokens " << after->mean_response_tokens);
    CHECK(after->accuracy > 0.0);
    CHECK(after->accuracy > before->accuracy);
    CHECK(after->mean_reward == doctest::Approx(after->accuracy));  // binary reward
    CHECK(after->mean_response_tokens >= 1.0);
    CHECK(after->mean_response_tokens <= 6.0);
    // The same prompts by number of terms: each counted once, in a term count the task allows.
    std::size_t prompts = 0, right = 0;
    std::uint32_t last_terms = 0;
    for (const auto& k : after->by_terms) {
      CHECK(k.terms > last_terms);  // ascending, no repeats
      CHECK(k.terms >= c.task.min_terms);
      CHECK(k.terms <= c.task.max_terms);
      CHECK(k.correct <= k.prompts);
      last_terms = k.terms;
      prompts += k.prompts;
      right += k.correct;
    }
    CHECK(prompts == after->prompts);
    CHECK(static_cast<double>(right) == doctest::Approx(after->accuracy * 40.0));
    // Greedy evaluation is deterministic.
    auto again = l->evaluate();
    REQUIRE(again.is_ok());
    CHECK(again->accuracy == after->accuracy);
    CHECK(again->mean_response_tokens == after->mean_response_tokens);
  }

  TEST_CASE("generate samples within the caps, with the training pass's log-probs") {
    auto l = make(small_config());
    std::vector<rl::Prompt> prompts;
    for (std::uint64_t i = 0; i < 70; ++i) {  // more than one chunk of 64
      auto p = l->task().train_prompt(i);
      REQUIRE(p.is_ok());
      prompts.push_back(*p);
    }
    const std::vector<float> before(l->model().params(),
                                    l->model().params() + l->model().param_count());
    std::uint64_t rng = 7;
    auto out = l->generate(prompts, 1.0f, 100, rng);
    REQUIRE_MESSAGE(out.is_ok(), out.status().to_string());
    REQUIRE(out->size() == prompts.size());
    std::vector<rl::Trajectory> trajs;
    bool some_long = false;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const auto& g = (*out)[i];
      REQUIRE(!g.tokens.empty());
      CHECK(g.logprobs.size() == g.tokens.size());
      CHECK(prompts[i].tokens.size() + g.tokens.size() <= 16);  // the context
      some_long = some_long || prompts[i].tokens.size() + g.tokens.size() == 16;
      rl::Trajectory t;
      t.prompt_tokens = prompts[i].tokens;
      t.response_tokens = g.tokens;
      trajs.push_back(t);
    }
    CHECK(some_long);  // an untrained model rarely says EOS: responses run to the context
    // At temperature 1 the sampled log-probs are the model's own, as the training pass has them.
    auto lp = l->response_logprobs(trajs);
    REQUIRE(lp.is_ok());
    for (std::size_t i = 0; i < trajs.size(); ++i) {
      for (std::size_t j = 0; j < trajs[i].response_tokens.size(); ++j)
        CHECK((*lp)[i][j] == doctest::Approx((*out)[i].logprobs[j]).epsilon(1e-4));
    }
    CHECK(std::memcmp(before.data(), l->model().params(), before.size() * sizeof(float)) == 0);
    // The same seed draws the same tokens; another seed others; max_new_tokens caps each.
    std::uint64_t same = 7, other = 8;
    auto again = l->generate(prompts, 1.0f, 100, same);
    auto different = l->generate(prompts, 1.0f, 100, other);
    auto capped = l->generate(prompts, 1.0f, 3, other);
    REQUIRE((again.is_ok() && different.is_ok() && capped.is_ok()));
    bool differs = false;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      CHECK((*again)[i].tokens == (*out)[i].tokens);
      differs = differs || (*different)[i].tokens != (*out)[i].tokens;
      CHECK((*capped)[i].tokens.size() <= 3);
    }
    CHECK(differs);
    std::uint64_t zero = 0;
    CHECK_FALSE(l->generate(prompts, 1.0f, 0, zero).is_ok());
  }

  TEST_CASE("a GRPO step raises the rewarded response and lowers the other") {
    auto l = make(small_config());
    const rl::Trajectory good = trajectory(*l, 0, gold(*l, 0), 1.0, "p0/0");
    const rl::Trajectory bad = trajectory(*l, 0, wrong(*l, 0), 0.0, "p0/1");
    auto stats = l->train({Sample{good, 1.0, 0}, Sample{bad, 1.0, 0}});
    REQUIRE_MESSAGE(stats.is_ok(), stats.status().to_string());
    CHECK(l->steps() == 1);
    CHECK(stats->samples == 2);
    CHECK(stats->tokens == good.response_tokens.size() + bad.response_tokens.size());
    CHECK(stats->mean_reward == doctest::Approx(0.5));
    CHECK(stats->grad_norm > 0.0);
    // On-policy and a single epoch: nothing is clipped and the policy has not moved yet.
    CHECK(stats->clip_fraction == 0.0);
    CHECK(stats->approx_kl == doctest::Approx(0.0));
    CHECK(stats->behaviour_kl == doctest::Approx(0.0).epsilon(1e-6));
    auto after = l->response_logprobs({good, bad});
    REQUIRE(after.is_ok());
    CHECK(sum((*after)[0]) > sum(good.logprobs));
    CHECK(sum((*after)[1]) < sum(bad.logprobs));
  }

  TEST_CASE("a group whose rewards are all equal gives no gradient") {
    auto l = make(small_config());
    const std::vector<float> p0 = params(*l);
    const rl::Trajectory a = trajectory(*l, 1, gold(*l, 1), 1.0, "p1/0");
    const rl::Trajectory b = trajectory(*l, 1, wrong(*l, 1), 1.0, "p1/1");
    auto stats = l->train({Sample{a, 1.0, 0}, Sample{b, 1.0, 0}});
    REQUIRE(stats.is_ok());
    CHECK(stats->grad_norm == 0.0);
    CHECK(params(*l) == p0);
  }

  TEST_CASE("a sample of weight 0 changes nothing") {
    LearnerConfig c = small_config();
    auto with = make(c);
    auto without = make(c);
    const rl::Trajectory good = trajectory(*with, 2, gold(*with, 2), 1.0, "p2/0");
    const rl::Trajectory bad = trajectory(*with, 2, wrong(*with, 2), 0.0, "p2/1");
    // Same group, and a reward that would move the group mean if it counted.
    const rl::Trajectory extra = trajectory(*with, 2, gold(*with, 2), 1.0, "p2/2");

    SUBCASE("alone: no step at all") {
      const std::vector<float> p0 = params(*with);
      auto stats = with->train({Sample{extra, 0.0, 9}, Sample{bad, 0.0, 9}});
      REQUIRE(stats.is_ok());
      CHECK(stats->tokens == 0);
      CHECK(stats->samples == 0);
      CHECK(stats->skipped == 2);
      CHECK(with->steps() == 0);
      CHECK(params(*with) == p0);
    }
    SUBCASE("among others: the same update as without it") {
      auto a = with->train({Sample{good, 1.0, 0}, Sample{extra, 0.0, 5}, Sample{bad, 1.0, 0}});
      auto b = without->train({Sample{good, 1.0, 0}, Sample{bad, 1.0, 0}});
      REQUIRE((a.is_ok() && b.is_ok()));
      CHECK(a->skipped == 1);
      CHECK(a->tokens == b->tokens);
      CHECK(a->loss == b->loss);
      CHECK(params(*with) == params(*without));
      CHECK(params(*with) != params(*make(c)));  // and the update did move the weights
    }
  }

  TEST_CASE("an episode's environment tokens are not trained on and do not count") {
    // The environment's answer after the model's last token changes none of the model tokens'
    // log-probs (attention looks back only), so with it masked out, and the loss a mean over the
    // model's tokens, the update must be the single turn's own.
    LearnerConfig c = small_config();
    auto with_env = make(c);
    auto single = make(c);
    const std::vector<float> p0 = params(*single);
    rl::Trajectory good = trajectory(*single, 3, gold(*single, 3), 1.0, "p3/0");
    const rl::Trajectory bad = trajectory(*single, 3, wrong(*single, 3), 0.0, "p3/1");
    rl::Trajectory episode = good;
    const std::size_t n = good.response_tokens.size();
    REQUIRE(good.prompt_tokens.size() + n + 2 <= static_cast<std::size_t>(c.gpt.context));
    episode.version = 1;
    episode.versions = {1};
    episode.response_tokens.insert(episode.response_tokens.end(), {5, 6});
    episode.logprobs.insert(episode.logprobs.end(), {0.0f, 0.0f});
    episode.loss_mask.assign(n, 1);
    episode.loss_mask.insert(episode.loss_mask.end(), {0, 0});
    episode.token_versions.assign(n, 1);
    episode.token_versions.insert(episode.token_versions.end(), {0, 0});

    auto a = with_env->train({Sample{episode, 1.0, 0}, Sample{bad, 1.0, 0}});
    auto b = single->train({Sample{good, 1.0, 0}, Sample{bad, 1.0, 0}});
    REQUIRE_MESSAGE(a.is_ok(), a.status().to_string());
    REQUIRE(b.is_ok());
    CHECK(a->tokens == b->tokens);
    CHECK(a->env_tokens == 2);
    CHECK(a->masked_fraction == 0.0);
    CHECK(a->loss == doctest::Approx(b->loss).epsilon(1e-6));
    const double step = moved(p0, params(*single));
    REQUIRE(step > 0.0);
    CHECK(moved(params(*with_env), params(*single)) <= 1e-5 * step);

    // PPO's values and GAE would run across the environment's tokens: refused, nothing changed.
    LearnerConfig ppo = c;
    ppo.algorithm = "ppo";
    ppo.gpt.value_head = true;
    auto p = make(ppo);
    const std::vector<float> before = params(*p);
    auto refused = p->train({Sample{episode, 1.0, 0}});
    REQUIRE_FALSE(refused.is_ok());
    CHECK(refused.status().message().find("use grpo") != std::string::npos);
    CHECK(params(*p) == before);

    // An environment token that claims a sampling log-prob is refused before anything changes.
    rl::Trajectory forged = episode;
    forged.logprobs[n] = -0.5f;
    auto no = with_env->train({Sample{forged, 1.0, 0}, Sample{bad, 1.0, 0}});
    REQUIRE_FALSE(no.is_ok());
    CHECK(no.status().message().find("environment token") != std::string::npos);
  }

  TEST_CASE("a stale sample is weighted by how far its behaviour policy was") {
    auto l = make(small_config());
    rl::Trajectory good = trajectory(*l, 3, gold(*l, 3), 1.0, "p3/0");
    rl::Trajectory bad = trajectory(*l, 3, wrong(*l, 3), 0.0, "p3/1");
    for (auto& lp : good.logprobs)
      lp -= 2.0f;  // the behaviour policy found these tokens much less likely: w = e^2, capped
    auto stats = l->train({Sample{good, 1.0, 3}, Sample{bad, 1.0, 3}});
    REQUIRE(stats.is_ok());
    CHECK(stats->truncated_fraction ==
          doctest::Approx(static_cast<double>(good.response_tokens.size()) /
                          static_cast<double>(stats->tokens)));
    CHECK(stats->behaviour_kl > 0.0);
  }

  TEST_CASE("corrections of stale samples: none ignores the proximal, m2po masks stale tokens") {
    LearnerConfig cap = small_config();
    LearnerConfig none = small_config();
    none.correction = "none";
    LearnerConfig m2po = small_config();
    m2po.correction = "m2po";
    auto batch = [](Learner& l, float shift) {
      rl::Trajectory good = trajectory(l, 3, gold(l, 3), 1.0, "p3/0");
      rl::Trajectory bad = trajectory(l, 3, wrong(l, 3), 0.0, "p3/1");
      for (auto& lp : good.logprobs)
        lp -= shift;  // log w = shift on the rewarded response's tokens
      return std::vector<Sample>{Sample{good, 1.0, 3}, Sample{bad, 1.0, 3}};
    };
    // On-policy (behaviour = proximal exactly) the three are one and the same step.
    auto a = make(cap), b = make(none), c = make(m2po);
    auto sa = a->train(batch(*a, 0.0f)), sb = b->train(batch(*b, 0.0f)),
         sc = c->train(batch(*c, 0.0f));
    REQUIRE(sa.is_ok());
    REQUIRE(sb.is_ok());
    REQUIRE(sc.is_ok());
    CHECK(sc->masked_fraction == 0.0);
    CHECK(params(*a) == params(*b));
    CHECK(params(*a) == params(*c));

    // Stale: the rewarded response's behaviour log-probs 2 below the learner's (w = e^2).
    auto a2 = make(cap), b2 = make(none), c2 = make(m2po);
    const auto p0 = params(*a2);
    auto stale_a = a2->train(batch(*a2, 2.0f));
    auto stale_b = b2->train(batch(*b2, 2.0f));
    auto stale_c = c2->train(batch(*c2, 2.0f));
    REQUIRE(stale_a.is_ok());
    REQUIRE(stale_b.is_ok());
    REQUIRE(stale_c.is_ok());
    const double good_share =
        static_cast<double>(gold(*a2, 3).size()) / static_cast<double>(stale_a->tokens);
    // behaviour-cap truncates w at 2 on those tokens; none has no w to truncate; m2po masks
    // exactly them ((log w)^2 = 4 each, the other tokens 0: only removing all of them brings the
    // mean under 0.04) and truncates nothing.
    CHECK(stale_a->truncated_fraction == doctest::Approx(good_share));
    CHECK(stale_b->truncated_fraction == 0.0);
    CHECK(stale_c->truncated_fraction == 0.0);
    CHECK(stale_c->masked_fraction == doctest::Approx(good_share));
    CHECK(stale_a->masked_fraction == 0.0);
    // behaviour-cap still learns from the rewarded tokens (w capped at 2); none clips them (ratio
    // e^2 against the behaviour policy, above 1 + clip_high with A > 0) and m2po masks them, so
    // those two take the same step here, from the other response alone.
    CHECK(params(*a2) != params(*b2));
    CHECK(params(*a2) != params(*c2));
    CHECK(moved(params(*b2), params(*c2)) < 1e-6 * moved(p0, params(*c2)));
    CHECK(moved(p0, params(*c2)) > 0.0);

    LearnerConfig unknown = small_config();
    unknown.correction = "clip";
    auto u = Learner::create(unknown);
    CHECK(u.status().code() == core::Code::kInvalidArgument);
    CHECK(u.status().message().find("behaviour-cap, none or m2po") != std::string::npos);
    LearnerConfig negative = small_config();
    negative.m2po_threshold = -0.1;
    CHECK(Learner::create(negative).status().code() == core::Code::kInvalidArgument);
  }

  TEST_CASE("load_weights copies weights in and leaves the optimizer alone") {
    auto a = make(small_config());
    LearnerConfig other = small_config();
    other.gpt.init_seed = 7;
    auto b = make(other);
    REQUIRE(params(*a) != params(*b));
    REQUIRE(b->load_weights(params(*a)).is_ok());
    CHECK(params(*a) == params(*b));
    CHECK(b->steps() == 0);
    std::vector<float> short_buffer(3, 0.0f);
    auto bad = b->load_weights(short_buffer);
    CHECK(bad.code() == core::Code::kInvalidArgument);
    CHECK(params(*a) == params(*b));
  }

  TEST_CASE("a PPO step lowers the value loss on a repeated batch") {
    LearnerConfig c = small_config();
    c.algorithm = "ppo";
    c.gpt.value_head = true;
    c.adamw.lr = 3e-3f;
    auto l = make(c);
    std::vector<Sample> batch;
    for (std::uint64_t i = 0; i < 4; ++i) {
      batch.push_back({trajectory(*l, i, gold(*l, i), 1.0, "g" + std::to_string(i)), 1.0, 0});
      batch.push_back({trajectory(*l, i, wrong(*l, i), 0.0, "w" + std::to_string(i)), 1.0, 0});
    }
    std::vector<double> losses;
    for (int step = 0; step < 12; ++step) {
      auto stats = l->train(batch);
      REQUIRE_MESSAGE(stats.is_ok(), stats.status().to_string());
      CHECK(std::isfinite(stats->loss));
      losses.push_back(stats->value_loss);
    }
    MESSAGE("value loss " << losses.front() << " -> " << losses.back());
    CHECK(losses.back() < 0.5 * losses.front());
    auto values = l->response_values({batch[0].trajectory});
    REQUIRE(values.is_ok());
    CHECK((*values)[0].size() == batch[0].trajectory.response_tokens.size());
  }

  TEST_CASE("several epochs clip the ratio and report the divergence") {
    LearnerConfig c = small_config();
    c.epochs = 4;
    c.adamw.lr = 1e-2f;
    auto l = make(c);
    const rl::Trajectory good = trajectory(*l, 4, gold(*l, 4), 1.0, "p4/0");
    const rl::Trajectory bad = trajectory(*l, 4, wrong(*l, 4), 0.0, "p4/1");
    auto stats = l->train({Sample{good, 1.0, 0}, Sample{bad, 1.0, 0}});
    REQUIRE(stats.is_ok());
    CHECK(l->steps() == 4);
    CHECK(stats->approx_kl > 0.0);
    CHECK(stats->clip_fraction > 0.0);
  }

  TEST_CASE("wrong input is a clear error that changes nothing") {
    auto l = make(small_config());
    const std::vector<float> p0 = params(*l);
    rl::Trajectory t = trajectory(*l, 5, gold(*l, 5), 1.0, "p5/0");
    rl::Trajectory u = trajectory(*l, 5, wrong(*l, 5), 0.0, "p5/1");
    auto expect_invalid = [&](const rl::Trajectory& broken, const std::string& words) {
      auto r = l->train({Sample{u, 1.0, 0}, Sample{broken, 1.0, 0}});
      REQUIRE_FALSE(r.is_ok());
      CHECK(r.status().code() == core::Code::kInvalidArgument);
      CHECK_MESSAGE(r.status().message().find(words) != std::string::npos, r.status().message());
      CHECK(r.status().message().find("p5/0") != std::string::npos);
    };
    rl::Trajectory short_lp = t;
    short_lp.logprobs.pop_back();
    expect_invalid(short_lp, "behaviour log-probs for");
    rl::Trajectory out_of_vocab = t;
    out_of_vocab.response_tokens[0] = rl::Tokenizer::kVocabSize;
    expect_invalid(out_of_vocab, "outside the vocabulary");
    rl::Trajectory too_long = t;
    too_long.response_tokens.assign(20, rl::Tokenizer::kEos);
    too_long.logprobs.assign(20, -1.0f);
    expect_invalid(too_long, "over the context");
    rl::Trajectory empty = t;
    empty.response_tokens.clear();
    empty.logprobs.clear();
    expect_invalid(empty, "empty response");
    auto neg = l->train({Sample{t, -1.0, 0}});
    CHECK(neg.status().code() == core::Code::kInvalidArgument);
    CHECK(l->steps() == 0);
    CHECK(params(*l) == p0);

    LearnerConfig ppo = small_config();
    ppo.algorithm = "ppo";
    auto no_head = Learner::create(ppo);
    CHECK(no_head.status().code() == core::Code::kInvalidArgument);
    CHECK(no_head.status().message().find("value_head") != std::string::npos);
    LearnerConfig unknown = small_config();
    unknown.algorithm = "dpo";
    CHECK(Learner::create(unknown).status().code() == core::Code::kInvalidArgument);
    LearnerConfig small_vocab = small_config();
    small_vocab.gpt.vocab = 10;
    CHECK(Learner::create(small_vocab).status().code() == core::Code::kInvalidArgument);
    CHECK(l->response_values({t}).status().code() == core::Code::kFailedPrecondition);
  }

  TEST_CASE("the RL learning rate decays by a cosine, and train() steps with it") {
    LearnerConfig c = small_config();
    c.adamw.lr = 1e-3f;
    c.lr_decay_steps = 2;
    c.lr_final = 0.1f;
    auto l = make(c);
    CHECK(l->lr_at(0) == doctest::Approx(1e-3));
    CHECK(l->lr_at(1) == doctest::Approx(1e-3 * (0.1 + 0.9 * 0.5)));
    CHECK(l->lr_at(2) == doctest::Approx(1e-4));
    CHECK(l->lr_at(50) == doctest::Approx(1e-4));  // stays at the floor

    // Two learners, one with the lr dropping to a tenth after its first step: the first steps
    // are identical, so the second step's moments are too, and its update is a tenth as large.
    LearnerConfig flat = small_config();
    flat.adamw.lr = 1e-3f;
    LearnerConfig decayed = flat;
    decayed.lr_decay_steps = 1;
    decayed.lr_final = 0.1f;
    auto a = make(flat);
    auto b = make(decayed);
    const rl::Trajectory good = trajectory(*a, 0, gold(*a, 0), 1.0, "p0/0");
    const rl::Trajectory bad = trajectory(*a, 0, wrong(*a, 0), 0.0, "p0/1");
    const std::vector<Sample> batch{Sample{good, 1.0, 0}, Sample{bad, 1.0, 0}};
    REQUIRE(a->train(batch).is_ok());
    REQUIRE(b->train(batch).is_ok());
    CHECK(params(*a) == params(*b));
    const std::vector<float> before = params(*a);
    REQUIRE(a->train(batch).is_ok());
    REQUIRE(b->train(batch).is_ok());
    const double step_a = moved(before, params(*a));
    const double step_b = moved(before, params(*b));
    REQUIRE(step_a > 0.0);
    CHECK(step_b / step_a == doctest::Approx(0.1).epsilon(1e-3));

    LearnerConfig wrong_final = small_config();
    wrong_final.lr_final = 0.0f;
    CHECK(wrong_final.validate().code() == core::Code::kInvalidArgument);
  }

  TEST_CASE("the warm-start learning rate decays by a cosine over its steps when asked") {
    // One step, then two steps flat and two steps decaying to a tenth: the second step runs at
    // 0.1 + 0.9 x (1 + cos(pi/2)) / 2 = 0.55 of warmstart_lr. Both see the same prompts and start
    // from the same first step, so the decayed second update is 0.55 of the flat one.
    LearnerConfig one = small_config();
    one.warmstart_steps = 1;
    LearnerConfig flat = one;
    flat.warmstart_steps = 2;
    LearnerConfig decayed = flat;
    decayed.warmstart_lr_final = 0.1f;
    auto a = make(one);
    auto b = make(flat);
    auto d = make(decayed);
    REQUIRE(a->warm_start().is_ok());
    REQUIRE(b->warm_start().is_ok());
    REQUIRE(d->warm_start().is_ok());
    const std::vector<float> first = params(*a);
    const double step_b = moved(first, params(*b));
    const double step_d = moved(first, params(*d));
    REQUIRE(step_b > 0.0);
    CHECK(step_d / step_b == doctest::Approx(0.55).epsilon(1e-3));

    for (float bad : {0.0f, 1.5f}) {
      LearnerConfig c = small_config();
      c.warmstart_lr_final = bad;
      CHECK(c.validate().code() == core::Code::kInvalidArgument);
    }
  }

  TEST_CASE("the config parses from JSON and rejects unknown keys") {
    LearnerConfig c;
    auto doc = core::config::parse_json_text(
        R"({"algorithm": "ppo", "gpt": {"value_head": true, "d_model": 64}, "epochs": 2})", "test");
    REQUIRE(doc.is_ok());
    REQUIRE(core::config::parse(*doc, c).is_ok());
    CHECK(c.algorithm == "ppo");
    CHECK(c.gpt.d_model == 64);
    CHECK(c.epochs == 2);
    CHECK(c.validate().is_ok());
    auto json = core::config::to_json(c);
    CHECK(json["clip"]["clip_high"] == 0.2);
    LearnerConfig d;
    auto bad = core::config::parse_json_text(R"({"gpt": {"layers": 3}})", "test");
    REQUIRE(bad.is_ok());
    CHECK(core::config::parse(*bad, d).code() == core::Code::kInvalidArgument);
    // The device is checked by name here; whether there is a GPU is the actor role's business.
    CHECK(c.device == "cpu");
    LearnerConfig e;
    e.device = "cuda";
    CHECK(e.validate().is_ok());
    e.device = "gpu0";
    CHECK(e.validate().code() == core::Code::kInvalidArgument);
    CHECK(e.validate().message().find("'gpu0'") != std::string::npos);
  }

  TEST_CASE("a checkpoint restores weights, optimizer state and steps") {
    LearnerConfig c = small_config();
    c.warmstart_steps = 3;
    auto a = make(c);
    REQUIRE(a->warm_start().is_ok());
    const rl::Trajectory good = trajectory(*a, 6, gold(*a, 6), 1.0, "p6/0");
    const rl::Trajectory bad = trajectory(*a, 6, wrong(*a, 6), 0.0, "p6/1");
    const std::vector<Sample> batch = {{good, 1.0, 0}, {bad, 1.0, 0}};
    REQUIRE(a->train(batch).is_ok());
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("sluice_learner_" + std::to_string(::getpid()) + ".ckpt"))
                                 .string();
    REQUIRE(a->save(path).is_ok());
    auto b = make(c);
    REQUIRE(b->load(path).is_ok());
    CHECK(b->steps() == 1);
    CHECK(params(*b) == params(*a));
    // Both continue identically (the optimizer's moments came along).
    REQUIRE(a->train(batch).is_ok());
    REQUIRE(b->train(batch).is_ok());
    CHECK(params(*b) == params(*a));

    // A damaged file is refused and leaves the learner as it was.
    {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(100);
      f.put('\x5a');
    }
    auto fresh = make(c);
    const std::vector<float> p0 = params(*fresh);
    CHECK(fresh->load(path).code() == core::Code::kDataLoss);
    CHECK(params(*fresh) == p0);
    CHECK(fresh->steps() == 0);
    // A model of another shape is refused.
    REQUIRE(a->save(path).is_ok());
    LearnerConfig other = c;
    other.gpt.d_model = 16;
    CHECK(make(other)->load(path).code() == core::Code::kInvalidArgument);
    std::filesystem::remove(path);
    CHECK(fresh->load(path).code() == core::Code::kNotFound);
  }
}
