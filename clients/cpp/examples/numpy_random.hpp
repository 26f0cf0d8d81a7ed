// numpy's default random generator in C++: np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed))),
// which is what Gymnasium's env.np_random is after env.reset(seed=seed). A port of a Gymnasium env that
// draws from this makes the same episodes from the same seeds as the Python env, bit for bit.
//
// Only what CartPole needs is here: seeding from a non-negative integer of any size, random() and uniform().
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace numpy_random {

// numpy.random.SeedSequence(entropy).generate_state(4, np.uint64) for a non-negative integer entropy, given
// as its 32-bit words, least significant first (0 is one word), and no spawn key
// (numpy/random/bit_generator.pyx: a pool of 4 32-bit words mixed with its hash constants).
inline std::array<std::uint64_t, 2 * 2> SeedSequenceState(const std::vector<std::uint32_t>& words) {
  constexpr std::uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
  constexpr std::uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
  constexpr int kXShift = 16, kPoolSize = 4;
  std::uint32_t hash_const = kInitA;
  auto hashmix = [&hash_const](std::uint32_t value) {
    value ^= hash_const;
    hash_const *= kMultA;
    value *= hash_const;
    return value ^ (value >> kXShift);
  };
  auto mix = [](std::uint32_t x, std::uint32_t y) {
    std::uint32_t result = kMixMultL * x - kMixMultR * y;
    return result ^ (result >> kXShift);
  };
  std::array<std::uint32_t, kPoolSize> pool{};
  for (int i = 0; i < kPoolSize; ++i) pool[i] = hashmix(i < static_cast<int>(words.size()) ? words[i] : 0);
  for (int source = 0; source < kPoolSize; ++source) {
    for (int target = 0; target < kPoolSize; ++target) {
      if (source != target) pool[target] = mix(pool[target], hashmix(pool[source]));
    }
  }
  for (std::size_t source = kPoolSize; source < words.size(); ++source) {
    for (int target = 0; target < kPoolSize; ++target) pool[target] = mix(pool[target], hashmix(words[source]));
  }

  std::array<std::uint64_t, 4> state{};
  std::uint32_t out_const = kInitB;
  for (int word = 0; word < 8; ++word) {  // 8 words of 32 bits, read as 4 little-endian uint64
    std::uint32_t value = pool[word % kPoolSize];
    value ^= out_const;
    out_const *= kMultB;
    value *= out_const;
    value ^= value >> kXShift;
    state[word / 2] |= static_cast<std::uint64_t>(value) << (32 * (word % 2));
  }
  return state;
}

// numpy.random.PCG64: a 128-bit LCG with the XSL-RR output function (numpy/random/src/pcg64).
class PCG64 {
 public:
  explicit PCG64(const std::vector<std::uint32_t>& seed_words) { Seed(seed_words); }

  // Seeds as PCG64(SeedSequence(seed)) does, `seed_words` being the seed's 32-bit words as SeedSequenceState's.
  void Seed(const std::vector<std::uint32_t>& seed_words) {
    const std::array<std::uint64_t, 4> words = SeedSequenceState(seed_words);
    const Uint128 initial_state = (Uint128(words[0]) << 64) | words[1];
    const Uint128 sequence = (Uint128(words[2]) << 64) | words[3];
    state_ = 0;
    increment_ = (sequence << 1) | 1;
    Advance();
    state_ += initial_state;
    Advance();
  }

  std::uint64_t Next64() {
    Advance();
    const std::uint64_t high = static_cast<std::uint64_t>(state_ >> 64), low = static_cast<std::uint64_t>(state_);
    const unsigned rotation = static_cast<unsigned>(high >> 58);
    const std::uint64_t folded = high ^ low;
    return (folded >> rotation) | (folded << ((64 - rotation) & 63));
  }

  // Generator.random(): a double in [0, 1) from the top 53 bits.
  double Random() { return static_cast<double>(Next64() >> 11) * (1.0 / 9007199254740992.0); }

  // Generator.uniform(low, high): low + (high - low) * random(), computed as numpy does.
  double Uniform(double low, double high) {
    const double range = high - low;
    return low + range * Random();
  }

 private:
  __extension__ typedef unsigned __int128 Uint128;  // GCC and Clang; -Wpedantic accepts it so marked
  static constexpr Uint128 kMultiplier = (Uint128(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;

  void Advance() { state_ = state_ * kMultiplier + increment_; }

  Uint128 state_ = 0, increment_ = 1;
};

// A seed for an unseeded first reset, as numpy draws one from the operating system's entropy (its words).
inline std::vector<std::uint32_t> EntropySeed() {
  std::random_device device;
  return {static_cast<std::uint32_t>(device()), static_cast<std::uint32_t>(device())};
}

}  // namespace numpy_random
