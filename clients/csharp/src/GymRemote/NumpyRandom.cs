using System;
using System.Collections.Generic;
using System.Numerics;
using System.Security.Cryptography;

namespace GymRemote
{
    /// <summary>
    /// NumPy's default random generator, <c>np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))</c>,
    /// which is what a Gymnasium env's <c>np_random</c> is after <c>reset(seed=seed)</c>. An env ported from
    /// Python that draws from this makes the same episodes from the same seeds, bit for bit. Only what the
    /// ports here need: seeding from a non-negative integer, <see cref="Random"/> and <see cref="Uniform"/>.
    /// </summary>
    public sealed class NumpyRandom
    {
        // numpy/random/bit_generator.pyx: SeedSequence's hash constants
        const uint InitA = 0x43b0d7e5, MultA = 0x931e8875, InitB = 0x8b51f9dd, MultB = 0x58f38ded;
        const uint MixMultL = 0xca01f9dd, MixMultR = 0x4973f715;
        const int XShift = 16, PoolSize = 4;

        // numpy/random/src/pcg64: the 128-bit LCG multiplier, high and low halves
        const ulong MultiplierHigh = 0x2360ED051FC65DA4UL, MultiplierLow = 0x4385DF649FCCF645UL;

        ulong stateHigh, stateLow, incrementHigh, incrementLow;

        /// <summary>A generator seeded as <c>np.random.default_rng(seed)</c>; <paramref name="seed"/> is a non-negative integer.</summary>
        public NumpyRandom(BigInteger seed)
        {
            Seed(seed);
        }

        /// <summary>A generator seeded from the operating system's entropy, as <c>np.random.default_rng()</c> is.</summary>
        public NumpyRandom()
            : this(EntropySeed())
        {
        }

        /// <summary>128 bits from the operating system's random source, as NumPy draws for an unseeded SeedSequence.</summary>
        public static BigInteger EntropySeed()
        {
            var drawn = new byte[16];
            using (var source = RandomNumberGenerator.Create()) source.GetBytes(drawn);
            var bytes = new byte[17];  // a trailing zero byte keeps the BigInteger non-negative
            Buffer.BlockCopy(drawn, 0, bytes, 0, 16);
            return new BigInteger(bytes);
        }

        /// <summary>Seeds the generator as <c>np.random.default_rng(seed)</c>: PCG64 from SeedSequence(seed).</summary>
        public void Seed(BigInteger seed)
        {
            ulong[] words = SeedSequenceState(seed);
            stateHigh = stateLow = 0;
            // increment = (sequence << 1) | 1, with sequence = words[2] << 64 | words[3]
            incrementHigh = (words[2] << 1) | (words[3] >> 63);
            incrementLow = (words[3] << 1) | 1;
            Advance();
            AddToState(words[0], words[1]);
            Advance();
        }

        /// <summary>
        /// <c>SeedSequence(entropy).generate_state(4, np.uint64)</c> for a non-negative integer entropy and no spawn
        /// key: a pool of 4 32-bit words mixed with the hash constants.
        /// </summary>
        public static ulong[] SeedSequenceState(BigInteger entropy)
        {
            if (entropy.Sign < 0) throw EnvException.ValueError("expected non-negative integer, not " + entropy);
            var words = new List<uint>();  // the integer as 32-bit words, least significant first; 0 is one word
            do
            {
                words.Add((uint)(entropy & uint.MaxValue));
                entropy >>= 32;
            }
            while (!entropy.IsZero);

            uint hashConst = InitA;
            var pool = new uint[PoolSize];
            for (int i = 0; i < PoolSize; i++) pool[i] = HashMix(i < words.Count ? words[i] : 0, ref hashConst);
            for (int source = 0; source < PoolSize; source++)
            {
                for (int target = 0; target < PoolSize; target++)
                {
                    if (source != target) pool[target] = Mix(pool[target], HashMix(pool[source], ref hashConst));
                }
            }
            for (int source = PoolSize; source < words.Count; source++)
            {
                for (int target = 0; target < PoolSize; target++) pool[target] = Mix(pool[target], HashMix(words[source], ref hashConst));
            }

            var state = new ulong[4];
            uint outConst = InitB;
            for (int word = 0; word < 8; word++)  // 8 words of 32 bits, read as 4 little-endian uint64
            {
                uint value = pool[word % PoolSize];
                value ^= outConst;
                unchecked { outConst *= MultB; value *= outConst; }
                value ^= value >> XShift;
                state[word / 2] |= (ulong)value << (32 * (word % 2));
            }
            return state;
        }

        static uint HashMix(uint value, ref uint hashConst)
        {
            unchecked
            {
                value ^= hashConst;
                hashConst *= MultA;
                value *= hashConst;
            }
            return value ^ (value >> XShift);
        }

        static uint Mix(uint x, uint y)
        {
            uint result = unchecked(MixMultL * x - MixMultR * y);
            return result ^ (result >> XShift);
        }

        /// <summary>The next 64 bits of PCG64 (XSL-RR output of the advanced state).</summary>
        public ulong Next64()
        {
            Advance();
            ulong folded = stateHigh ^ stateLow;
            int rotation = (int)(stateHigh >> 58);
            return (folded >> rotation) | (folded << ((64 - rotation) & 63));
        }

        /// <summary><c>Generator.random()</c>: a double in [0, 1) from the top 53 bits.</summary>
        public double Random()
        {
            return (Next64() >> 11) * (1.0 / 9007199254740992.0);
        }

        /// <summary><c>Generator.uniform(low, high)</c>: <c>low + (high - low) * random()</c>, as NumPy computes it.</summary>
        public double Uniform(double low, double high)
        {
            double range = high - low;
            return low + range * Random();
        }

        // state = state * multiplier + increment, modulo 2**128
        void Advance()
        {
            ulong productHigh, productLow;
            MultiplyFull(stateLow, MultiplierLow, out productHigh, out productLow);
            unchecked { productHigh += stateHigh * MultiplierLow + stateLow * MultiplierHigh; }
            stateHigh = productHigh;
            stateLow = productLow;
            AddToState(incrementHigh, incrementLow);
        }

        void AddToState(ulong high, ulong low)
        {
            unchecked
            {
                ulong sum = stateLow + low;
                stateHigh = stateHigh + high + (sum < low ? 1UL : 0UL);
                stateLow = sum;
            }
        }

        // the full 128-bit product of two 64-bit numbers, from 32-bit halves
        static void MultiplyFull(ulong a, ulong b, out ulong high, out ulong low)
        {
            unchecked
            {
                ulong aLow = (uint)a, aHigh = a >> 32, bLow = (uint)b, bHigh = b >> 32;
                ulong lowLow = aLow * bLow, highLow = aHigh * bLow, lowHigh = aLow * bHigh, highHigh = aHigh * bHigh;
                ulong middle = (lowLow >> 32) + (uint)highLow + (uint)lowHigh;
                low = (middle << 32) | (uint)lowLow;
                high = highHigh + (highLow >> 32) + (lowHigh >> 32) + (middle >> 32);
            }
        }
    }
}
