// The finite job's limit: a lower bound on the simulated wall time of the whole job under any
// scheduler, for the `limit` row of `sluice simulate` (sim/ideal.cpp builds its input from a job).
// The `steady-limit` row is the throughput limit instead (every rollout at its full batch, the
// trainer back to back, no start and no end); a finite job also has a start and an end that no
// scheduler avoids, and this bound counts them.
//
// The model is the simulator's (sim/simulator.hpp). A rollout r decodes in steps of
// t0_r + t1_r x b seconds for a batch of b <= cap_r sequences, each step one token for each; it
// decodes nothing while it prefills (prefill_r a token, at least a sequence's prompt and each
// answer from its environment) or before it holds its first weights. The actor trains batches of
// whole groups one at a time, a step taking train_fixed + train_per_token x its tokens, and after
// every step but the last it waits `publish_s` for its publish. A trajectory is trained once;
// nothing is dropped.
//
// Derivation. Let K be the number of steps, w0 the earliest time a rollout can hold weights
// (first_weights_s). Step k (1..K) cannot start before every trajectory of steps 1..k has
// finished, and steps k..K run one after another after it, so for every k
//
//     wall >= w0 + G(k) + T(k)
//
// where G(k) bounds the time for the m_k = groups of steps 1..k to be generated, and T(k) bounds
// the training of steps k..K. The limit is the largest of these K terms:
//   k = 1  is the first batch's generation followed by every step back to back (this also bounds
//          "the training of all batches back to back", G >= 0);
//   k = K  is the whole job's generation followed by the last step (this bounds "generation of
//          all tokens at full fleet throughput" and "the longest sequence, then the last batch").
//
// G(k) is the larger of two bounds, each minimised over every choice of m_k groups (a scheduler
// that knew every length could pick the quickest groups first):
//   longest: a trajectory needs at least its decode tokens x min_r (t0_r + t1_r) (a step at a
//     batch of one on the fastest rollout), its prefill tokens x min_r prefill_r, and its waits
//     on the environment, one after another; a group is done when its slowest member is. The
//     m_k-th smallest group time.
//   throughput: a rollout decodes at most rho_r = cap_r / (t0_r + t1_r cap_r) tokens a second
//     (a step's tokens per second grow with the batch), and only while it does not prefill, so
//     over a time g: sum_r rho_r g >= decode tokens + sum_r rho_r prefill_r x (its prefill
//     tokens) >= D + min_r (rho_r prefill_r) P for the set's decode tokens D and prefill tokens
//     P. Per group: cost = D + min_r(rho_r prefill_r) P; the sum of the m_k smallest costs over
//     sum_r rho_r.
// T(k) = (K - k + 1) train_fixed + train_per_token x (the job's trained tokens less the most that
//   k - 1 full steps can hold: the largest groups) + (K - k) publish_s.
//
// Left out, which keeps it a lower bound: KV-cache limits, the CPU model, the relays' and loads'
// cost of later versions, reports and collects, staleness.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.hpp"

namespace sluice::sim {

// One trajectory of the job, as much of it as no scheduler avoids.
struct LimitTrajectory {
  std::uint64_t decode = 0;   // tokens it decodes (one decode step each)
  std::uint64_t prefill = 0;  // tokens it prefills at least (its prompt, each answer)
  std::uint64_t trained = 0;  // tokens it adds to its step (decoded tokens and answers)
  double wait_s = 0;          // seconds it waits on its environment (its calls)
};

// One rollout's engine (seconds).
struct LimitRollout {
  double t0_s = 0, t1_s = 0, prefill_s = 0;
  std::uint32_t max_sequences = 1;  // >= 1
};

struct LimitJob {
  std::vector<std::vector<LimitTrajectory>> groups;  // one per prompt, each non-empty
  std::uint32_t batch_groups = 1;                    // groups a full step takes, >= 1
  std::vector<LimitRollout> rollouts;                // non-empty
  double train_fixed_s = 0, train_s_per_token = 0;
  double publish_s = 0;        // the actor's stall after each step but the last
  double first_weights_s = 0;  // the earliest a rollout holds its first weights
};

struct JobLimit {
  double wall_s = 0;  // the bound
  std::uint64_t steps = 0, trained_tokens = 0, decode_tokens = 0;
  // The term that is the bound: k (1: the first batch; steps: the last), and its parts.
  std::uint64_t binding_step = 0;
  double generate_s = 0;  // G(k), after first_weights_s
  double train_s = 0;     // T(k)
  // For the table: the whole job's generation at full throughput (G(K)'s throughput bound), the
  // training of every step back to back (T(1)), and the slowest group alone.
  double generate_all_s = 0, train_all_s = 0, longest_s = 0;
  double fleet_tokens_per_s = 0;  // sum_r rho_r
};

// Errors: no group, an empty group, no rollout, batch_groups or a rollout's max_sequences 0, or
// a negative time.
core::Result<JobLimit> job_limit(const LimitJob& job);

}  // namespace sluice::sim
