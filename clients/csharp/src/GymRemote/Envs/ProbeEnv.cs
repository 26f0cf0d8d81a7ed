using System;
using System.Collections.Generic;
using System.Numerics;

namespace GymRemote.Envs
{
    /// <summary>
    /// The conformance probe env, <c>gym_remote/Probe-v0</c>, exactly as docs/CONFORMANCE.md §1 defines it and
    /// gym_remote/probe.py implements it: the same observations, rewards, flags and infos, bit for bit, and the
    /// same errors at the same points of a step.
    /// </summary>
    public sealed class ProbeEnv : Env
    {
        /// <summary>Every episode is truncated at this step (and may terminate at the same step).</summary>
        public const int EpisodeLimit = 5;

        // Python's float("nan"): the quiet NaN with the sign bit clear (.NET's double.NaN has it set)
        static readonly double PythonNaN = BitConverter.Int64BitsToDouble(0x7FF8000000000000);

        static readonly BigInteger Int64Limit = BigInteger.One << 63;

        readonly string renderMode;
        readonly Space observationSpace = MakeObservationSpace();
        readonly Space actionSpace = MakeActionSpace();
        long draw;  // the seed stream: the last draw, before the offset
        long baseValue;
        long level;
        long t;
        long termStep;
        BigInteger lastSeed = BigInteger.MinusOne;  // np_random_seed: -1 before any seeded reset
        readonly float[] zeta = new float[2];
        readonly sbyte[] bits = new sbyte[2];

        /// <param name="renderMode">null or "ansi" (Render then returns "t=&lt;t&gt; base=&lt;base&gt;").</param>
        public ProbeEnv(string renderMode = null)
        {
            if (renderMode != null && renderMode != "ansi") throw EnvException.ValueError("render_mode must be None or 'ansi', not " + PythonText.Quote(renderMode));
            this.renderMode = renderMode;
        }

        /// <summary>The probe's observation space (CONFORMANCE.md §1.1), freshly built.</summary>
        public static Space MakeObservationSpace()
        {
            return new DictSpace(
                DictSpace.Entry("zeta", new BoxSpace(double.NegativeInfinity, double.PositiveInfinity, new[] { 2 }, DType.Float32)),
                DictSpace.Entry("alpha", new DiscreteSpace(16, -3)),
                DictSpace.Entry("mid", new TupleSpace(new MultiDiscreteSpace(new long[] { 4, 6 }), new MultiBinarySpace(3))));
        }

        /// <summary>The probe's action space (CONFORMANCE.md §1.1), freshly built.</summary>
        public static Space MakeActionSpace()
        {
            return new TupleSpace(new DiscreteSpace(3, -1), new BoxSpace(-1.0, 1.0, new[] { 2 }, DType.Float32), new MultiBinarySpace(2));
        }

        public override Space ObservationSpace
        {
            get { return observationSpace; }
        }

        public override Space ActionSpace
        {
            get { return actionSpace; }
        }

        public override string ClassName
        {
            get { return "ProbeEnv"; }
        }

        public override Value Metadata
        {
            get { return Value.Dict(Value.Entry("render_modes", Value.List("ansi")), Value.Entry("render_fps", 4)); }
        }

        public override string RenderMode
        {
            get { return renderMode; }
        }

        /// <summary>The probe's own attribute <c>np_random_seed</c> (CONFORMANCE.md §1.6); no other.</summary>
        public override bool TryGetAttribute(string name, out Value value)
        {
            value = name == "np_random_seed" ? Value.Int(lastSeed) : null;
            return value != null;
        }

        public override ResetResult Reset(BigInteger? seed, Value options)
        {
            CheckSeed(seed);
            if (seed.HasValue) lastSeed = seed.Value;  // before the offset is checked, as in probe.py
            draw = seed.HasValue ? (long)(seed.Value % 1000) : (draw * 37 + 11) % 1000;
            long offset = 0;
            // Find looks a key up as a Python dict does, and finds nothing in options that are no dict
            Value given = options == null ? null : options.Find("offset");
            if (given != null)
            {
                if (given.Kind != ValueKind.Int || given.AsInteger < 0 || given.AsInteger >= 1000)
                {
                    throw EnvException.ValueError("options['offset'] must be an int in [0, 1000), not " + given.Repr());
                }
                offset = (long)given.AsInteger;
            }
            baseValue = draw + offset;
            level = baseValue % 7;
            t = 0;
            termStep = 2 + baseValue % 5;
            zeta[0] = (float)(baseValue / 4.0);
            zeta[1] = (float)(-baseValue / 8.0);
            bits[0] = bits[1] = 0;
            var info = Value.Dict(Value.Entry("base", baseValue), Value.Entry("seeded", seed.HasValue), Value.Entry("offset", offset));
            return new ResetResult(Observation(), info);
        }

        // The checks and state changes come in probe.py's order, so that a bad action fails at the same point.
        public override StepResult Step(Value action)
        {
            if (action.Kind != ValueKind.Tuple && action.Kind != ValueKind.List)
            {
                throw EnvException.TypeError("cannot unpack non-iterable " + action.TypeName() + " object");
            }
            if (action.Items.Count != 3)
            {
                throw EnvException.ValueError(
                    (action.Items.Count < 3 ? "not enough" : "too many") + " values to unpack (expected 3, got " + action.Items.Count + ")");
            }
            long direction = Direction(action.Items[0]);
            double[] push = action.Items[1].ToDoubles();
            long[] pressed = action.Items[2].ToInt64s();
            for (int i = 0; i < 2; i++) bits[i] = i < pressed.Length ? unchecked((sbyte)pressed[i]) : (sbyte)0;
            t += 1;
            level += direction;
            if (push.Length != 1 && push.Length != 2)
            {
                throw EnvException.ValueError("operands could not be broadcast together with shapes (2,) (" + push.Length + ",) ");  // NumPy ends it with a space
            }
            for (int i = 0; i < 2; i++)
            {
                float half = (float)push[push.Length == 1 ? 0 : i] * 0.5f;  // float32 arithmetic, as NumPy's
                zeta[i] = zeta[i] + half;
            }
            if (pressed.Length < 2)
            {
                throw EnvException.IndexError("index " + pressed.Length + " is out of bounds for axis 0 with size " + pressed.Length);
            }
            double reward = level + 0.25 * (bits[0] + 2 * bits[1]);
            if (t >= 256) throw EnvException.ValueError("bytes must be in range(0, 256)");
            var info = new List<KeyValuePair<string, Value>>
            {
                Value.Entry("t", t),
                Value.Entry("half", t / 2.0),
                Value.Entry("even", t % 2 == 0),
                Value.Entry("level", Value.Scalar(DType.Int32, level)),
                Value.Entry("quarter", Value.Scalar(DType.Float32, t / 4.0)),
                Value.Entry("vec", Value.Array(DType.Int16, new[] { t, -t })),
                Value.Entry("pair", Value.Tuple(t, "x")),
                Value.Entry("items", Value.List(BigInteger.Pow(2, 64) + t, Value.None, 1.5)),
                Value.Entry("none", Value.None),
                Value.Entry("nan", PythonNaN),
                Value.Entry("blob", Value.Bytes(new[] { (byte)t, (byte)0, (byte)255 })),
                Value.Entry("name", "prob\u00e9"),
            };
            if (t % 2 == 1) info.Add(Value.Entry("odd", Value.Dict(Value.Entry("t", t), Value.Entry("inf", double.PositiveInfinity))));
            return new StepResult(Observation(), reward, t == termStep, t >= EpisodeLimit, Value.Dict(info));
        }

        public override Value Render()
        {
            return renderMode == "ansi" ? Value.String("t=" + t + " base=" + baseValue) : Value.None;
        }

        /// <summary>
        /// The direction as CONFORMANCE.md §1.4 converts it (probe.py's <c>_integer</c>): Python's <c>int()</c> of a
        /// number, a NumPy scalar or a one-item array (a float truncated toward zero), within the signed 64-bit range;
        /// ValueError for NaN, an infinity or a number out of range, TypeError for anything that is not a number.
        /// </summary>
        static long Direction(Value value)
        {
            if (value.Kind == ValueKind.ObjectArray && value.Size == 1) value = value.Items[0];
            else if (value.Kind == ValueKind.Array && value.Size == 1) value = Value.Scalar(value.DType, value.ToByteArray());
            if (value.Kind == ValueKind.Scalar)
            {
                switch (value.DType.Kind)
                {
                    case 'U': throw NotANumber("str");
                    case 'S': throw NotANumber("bytes");
                    case 'c': throw NotANumber("complex");
                    default: value = value.Item(0); break;  // (a datetime64 or float16 throws NotSupportedException)
                }
            }
            switch (value.Kind)
            {
                case ValueKind.Bool: return value.AsBool ? 1 : 0;
                case ValueKind.Float:
                    double number = value.AsFloat;
                    if (double.IsNaN(number) || double.IsInfinity(number)) throw EnvException.ValueError("cannot convert float " + value.Repr() + " to an integer");
                    if (number < -9223372036854775808.0 || number >= 9223372036854775808.0)
                    {
                        throw EnvException.ValueError("the float " + value.Repr() + " is outside the signed 64-bit range");
                    }
                    return (long)Math.Truncate(number);
                case ValueKind.Int:
                    BigInteger whole = value.AsInteger;
                    if (whole < -Int64Limit || whole >= Int64Limit) throw EnvException.ValueError("the int " + value.Repr() + " is outside the signed 64-bit range");
                    return (long)whole;
                case ValueKind.Array:
                case ValueKind.ObjectArray: throw NotANumber("ndarray");
                default: throw NotANumber(value.TypeName());
            }
        }

        static EnvException NotANumber(string typeName)
        {
            return EnvException.TypeError("the direction must be a number, not " + typeName);
        }

        Value Observation()
        {
            long b = baseValue;
            return Value.Dict(
                Value.Entry("zeta", Value.Array(new[] { zeta[0], zeta[1] })),
                Value.Entry("alpha", Value.Scalar(DType.Int64, -3 + (b + t) % 16)),
                Value.Entry("mid", Value.Tuple(
                    Value.Array(DType.Int64, new[] { (b + t) % 4, (3 * b + t) % 6 }),
                    Value.Array(DType.Int8, new long[] { bits[0], bits[1], (b + t) % 2 }))));
        }
    }
}
