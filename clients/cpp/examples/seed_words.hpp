// A reset's seed as the learner sent it, a non-negative int of any size (Gymnasium's reset(seed=...) takes
// one), for the example envs: as 32-bit words, which numpy.random.SeedSequence reads, and its remainder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gym_remote/value.hpp"

namespace seed_words {

// The seed's 32-bit words, least significant first, as numpy.random.SeedSequence splits an int (0 is one
// word). `seed` is a non-negative kInt, or a kBigInt (its hex text); the client refuses negative seeds
// before an env sees them.
inline std::vector<std::uint32_t> SeedWords(const gym_remote::Value& seed) {
  std::vector<std::uint32_t> words;
  if (seed.kind() == gym_remote::Value::Kind::kBigInt) {
    const std::string& hex = seed.text();
    for (std::size_t end = hex.size(); end > 0;) {  // 8 hex digits a word, from the least significant end
      const std::size_t begin = end > 8 ? end - 8 : 0;
      words.push_back(static_cast<std::uint32_t>(std::stoul(hex.substr(begin, end - begin), nullptr, 16)));
      end = begin;
    }
    while (words.size() > 1 && words.back() == 0) words.pop_back();
  } else {
    auto number = static_cast<std::uint64_t>(seed.as_int());
    do {
      words.push_back(static_cast<std::uint32_t>(number));
      number >>= 32;
    } while (number != 0);
  }
  return words;
}

// The int whose words these are, modulo `modulus` (Python's %, the int being non-negative).
inline std::uint32_t Remainder(const std::vector<std::uint32_t>& words, std::uint32_t modulus) {
  std::uint64_t remainder = 0;  // below modulus, so (remainder << 32) | word fits in 64 bits
  for (auto word = words.rbegin(); word != words.rend(); ++word) remainder = ((remainder << 32) | *word) % modulus;
  return static_cast<std::uint32_t>(remainder);
}

}  // namespace seed_words
