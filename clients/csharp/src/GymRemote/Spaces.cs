using System;
using System.Collections.Generic;

namespace GymRemote
{
    /// <summary>
    /// A Gymnasium space (docs/PROTOCOL.md §7.2). <see cref="Describe"/> gives the description the protocol sends
    /// (without <c>rng</c>: these spaces do not sample); two spaces are equal when their descriptions are.
    /// </summary>
    public abstract class Space : IEquatable<Space>
    {
        /// <summary>The Gymnasium class name: "Box", "Discrete", "Dict" ...</summary>
        public abstract string Name { get; }

        /// <summary>The description of PROTOCOL.md §7.2, as a value (a dict whose first key is "space").</summary>
        public abstract Value Describe();

        /// <summary>
        /// Whether <paramref name="value"/> is an element of the space, as Gymnasium's <c>contains</c> answers for
        /// NumPy arrays and scalars (Python lists standing for arrays are not converted: they are not elements).
        /// </summary>
        public abstract bool Contains(Value value);

        protected Value Description(params KeyValuePair<string, Value>[] fields)
        {
            var entries = new List<KeyValuePair<string, Value>> { Value.Entry("space", Name) };
            entries.AddRange(fields);
            return Value.Dict(entries);
        }

        public bool Equals(Space other)
        {
            return other != null && Describe().Equals(other.Describe());
        }

        public override bool Equals(object obj)
        {
            return Equals(obj as Space);
        }

        public override int GetHashCode()
        {
            return Describe().GetHashCode();
        }

        public override string ToString()
        {
            return Describe().Repr();
        }

        /// <summary>The list of the descriptions of <paramref name="spaces"/>.</summary>
        protected static Value DescribeAll(IReadOnlyList<Space> spaces)
        {
            var descriptions = new Value[spaces.Count];
            for (int i = 0; i < spaces.Count; i++) descriptions[i] = spaces[i].Describe();
            return Value.List(descriptions);
        }

        internal static bool IsIntegerLeaf(Value value)
        {
            return value.Kind == ValueKind.Int || value.Kind == ValueKind.Bool
                || (value.Kind == ValueKind.Scalar || value.Kind == ValueKind.Array) && value.DType.IsInteger;
        }

        internal static bool SameShape(Value value, int[] shape)
        {
            if (value.Kind != ValueKind.Array && value.Kind != ValueKind.Scalar) return false;
            int[] own = value.Shape;
            if (own.Length != shape.Length) return false;
            for (int i = 0; i < own.Length; i++)
            {
                if (own[i] != shape[i]) return false;
            }
            return true;
        }
    }

    /// <summary>Gymnasium's <c>Box(low, high, shape, dtype)</c>: arrays of one shape with every item in [low, high].</summary>
    public sealed class BoxSpace : Space
    {
        /// <summary>A Box whose every item has the same bounds (infinities allowed for float dtypes).</summary>
        public BoxSpace(double low, double high, int[] shape, DType dtype)
            : this(Filled(low, shape), Filled(high, shape), dtype, shape)
        {
        }

        /// <summary>A Box of shape (n,) with bounds per item.</summary>
        public BoxSpace(double[] low, double[] high, DType dtype)
            : this(low, high, dtype, new[] { low.Length })
        {
        }

        BoxSpace(double[] low, double[] high, DType dtype, int[] shape)
            : this(Bounds(low, dtype, shape), Bounds(high, dtype, shape))
        {
        }

        /// <summary>A Box from its bounds: two arrays of the same dtype and shape.</summary>
        public BoxSpace(Value low, Value high)
        {
            if (low == null || high == null) throw new ArgumentNullException(low == null ? "low" : "high");
            if (low.Kind != ValueKind.Array || high.Kind != ValueKind.Array || !low.DType.Equals(high.DType) || !SameShape(high, low.Shape))
            {
                throw new ArgumentException("a Box's low and high are arrays of one dtype and shape, not " + low.Repr() + " and " + high.Repr());
            }
            Low = low;
            High = high;
        }

        public override string Name
        {
            get { return "Box"; }
        }

        /// <summary>The lower bounds, an array of <see cref="DType"/> and <see cref="Shape"/>.</summary>
        public Value Low { get; }

        /// <summary>The upper bounds, an array of <see cref="DType"/> and <see cref="Shape"/>.</summary>
        public Value High { get; }

        public DType DType
        {
            get { return Low.DType; }
        }

        public int[] Shape
        {
            get { return Low.Shape; }
        }

        public override Value Describe()
        {
            return Description(Value.Entry("low", Low), Value.Entry("high", High), Value.Entry("dtype", DType.Str));
        }

        public override bool Contains(Value value)
        {
            if (!SameShape(value, Low.Shape) || !value.DType.CanCastSafely(DType)) return false;
            for (int i = 0; i < value.Size; i++)
            {
                double item = value.GetDouble(i);
                if (!(item >= Low.GetDouble(i) && item <= High.GetDouble(i))) return false;
            }
            return true;
        }

        static double[] Filled(double bound, int[] shape)
        {
            long size = 1;
            foreach (int extent in shape) size *= extent;
            var values = new double[size];
            for (long i = 0; i < size; i++) values[i] = bound;
            return values;
        }

        static Value Bounds(double[] bounds, DType dtype, int[] shape)
        {
            if (dtype.Kind == 'f') return Value.Array(dtype, bounds, shape);
            var integers = new long[bounds.Length];
            for (int i = 0; i < bounds.Length; i++) integers[i] = checked((long)bounds[i]);
            return Value.Array(dtype, integers, shape);
        }
    }

    /// <summary>Gymnasium's <c>Discrete(n, start)</c>: the integers start, ..., start + n - 1.</summary>
    public sealed class DiscreteSpace : Space
    {
        public DiscreteSpace(long n, long start = 0, DType dtype = null)
        {
            if (n <= 0) throw new ArgumentOutOfRangeException("n", "a Discrete space has n > 0, not " + n);
            N = n;
            Start = start;
            DType = dtype ?? DType.Int64;
            if (!DType.IsInteger) throw new ArgumentException("a Discrete space's dtype is an integer dtype, not " + DType, "dtype");
        }

        public override string Name
        {
            get { return "Discrete"; }
        }

        public long N { get; }

        public long Start { get; }

        public DType DType { get; }

        public override Value Describe()
        {
            return Description(Value.Entry("n", N), Value.Entry("start", Start), Value.Entry("dtype", DType.Str));
        }

        /// <summary>
        /// An int (a bool is one, as in Python) that fits the dtype, or an integer NumPy scalar or 0-d array whose
        /// dtype casts safely to it, in range.
        /// </summary>
        public override bool Contains(Value value)
        {
            if (!IsIntegerLeaf(value) || value.Kind == ValueKind.Array && value.Shape.Length != 0) return false;
            if (value.Kind == ValueKind.Scalar || value.Kind == ValueKind.Array)
            {
                if (!value.DType.CanCastSafely(DType)) return false;
            }
            else if (value.Kind == ValueKind.Int && (value.AsInteger < long.MinValue || value.AsInteger > long.MaxValue))
            {
                return false;
            }
            long x = value.ToInt64();
            return x >= Start && x - Start < N;
        }
    }

    /// <summary>Gymnasium's <c>MultiDiscrete(nvec, start)</c>: integer arrays with item i in [start[i], start[i] + nvec[i]).</summary>
    public sealed class MultiDiscreteSpace : Space
    {
        public MultiDiscreteSpace(long[] nvec, long[] start = null, DType dtype = null, int[] shape = null)
        {
            if (nvec == null) throw new ArgumentNullException("nvec");
            DType kind = dtype ?? DType.Int64;
            foreach (long n in nvec)
            {
                if (n <= 0) throw new ArgumentOutOfRangeException("nvec", "a MultiDiscrete space's nvec items are > 0");
            }
            start = start ?? new long[nvec.Length];
            if (start.Length != nvec.Length) throw new ArgumentException("start has " + start.Length + " items, nvec " + nvec.Length, "start");
            Nvec = Value.Array(kind, nvec, shape);
            StartValues = Value.Array(kind, start, shape);
        }

        public override string Name
        {
            get { return "MultiDiscrete"; }
        }

        /// <summary>The counts, an array of the space's dtype and shape.</summary>
        public Value Nvec { get; }

        /// <summary>The lowest values, an array of the space's dtype and shape.</summary>
        public Value StartValues { get; }

        public DType DType
        {
            get { return Nvec.DType; }
        }

        public override Value Describe()
        {
            return Description(Value.Entry("nvec", Nvec), Value.Entry("start", StartValues), Value.Entry("dtype", DType.Str));
        }

        public override bool Contains(Value value)
        {
            if (!SameShape(value, Nvec.Shape) || !value.DType.CanCastSafely(DType)) return false;
            for (int i = 0; i < value.Size; i++)
            {
                var offset = value.GetInteger(i) - StartValues.GetInteger(i);
                if (offset < 0 || offset >= Nvec.GetInteger(i)) return false;
            }
            return true;
        }
    }

    /// <summary>Gymnasium's <c>MultiBinary(n)</c>: int8 arrays of 0s and 1s of shape (n,) or of the given shape.</summary>
    public sealed class MultiBinarySpace : Space
    {
        readonly bool single;

        /// <summary><c>MultiBinary(n)</c>: shape (n,).</summary>
        public MultiBinarySpace(int n)
            : this(new[] { n })
        {
            single = true;
        }

        /// <summary><c>MultiBinary([d0, d1, ...])</c>: that shape.</summary>
        public MultiBinarySpace(int[] shape)
        {
            if (shape == null || shape.Length == 0) throw new ArgumentException("a MultiBinary space needs a shape", "shape");
            foreach (int extent in shape)
            {
                if (extent < 0) throw new ArgumentOutOfRangeException("shape", "a MultiBinary space's extents are >= 0");
            }
            Shape = (int[])shape.Clone();
        }

        public override string Name
        {
            get { return "MultiBinary"; }
        }

        public int[] Shape { get; }

        public override Value Describe()
        {
            if (single) return Description(Value.Entry("n", Shape[0]));
            var extents = new Value[Shape.Length];
            for (int i = 0; i < Shape.Length; i++) extents[i] = Shape[i];
            return Description(Value.Entry("n", Value.List(extents)));
        }

        public override bool Contains(Value value)
        {
            if (!SameShape(value, Shape) || "biuf".IndexOf(value.DType.Kind) < 0) return false;
            for (int i = 0; i < value.Size; i++)
            {
                double bit = value.GetDouble(i);
                if (bit != 0 && bit != 1) return false;
            }
            return true;
        }
    }

    /// <summary>A space made of a list of sub-spaces (Tuple, OneOf).</summary>
    public abstract class CompositeSpace : Space
    {
        readonly Space[] spaces;

        protected CompositeSpace(Space[] spaces)
        {
            if (spaces == null || Array.IndexOf(spaces, null) >= 0) throw new ArgumentNullException("spaces");
            this.spaces = (Space[])spaces.Clone();
        }

        public IReadOnlyList<Space> Spaces
        {
            get { return spaces; }
        }

        public override Value Describe()
        {
            return Description(Value.Entry("spaces", DescribeAll(spaces)));
        }
    }

    /// <summary>Gymnasium's <c>Tuple(spaces)</c>: tuples with one element of each sub-space.</summary>
    public sealed class TupleSpace : CompositeSpace
    {
        public TupleSpace(params Space[] spaces)
            : base(spaces)
        {
        }

        public override string Name
        {
            get { return "Tuple"; }
        }

        public override bool Contains(Value value)
        {
            // a list is taken as a tuple, as Gymnasium's Tuple.contains does
            if (value.Kind != ValueKind.Tuple && value.Kind != ValueKind.List || value.Items.Count != Spaces.Count) return false;
            for (int i = 0; i < Spaces.Count; i++)
            {
                if (!Spaces[i].Contains(value.Items[i])) return false;
            }
            return true;
        }
    }

    /// <summary>Gymnasium's <c>Dict(spaces)</c>: dicts with one element of each sub-space, keys in the given order.</summary>
    public sealed class DictSpace : Space
    {
        readonly KeyValuePair<string, Space>[] spaces;

        public DictSpace(params KeyValuePair<string, Space>[] spaces)
        {
            if (spaces == null) throw new ArgumentNullException("spaces");
            var keys = new HashSet<string>();
            foreach (var entry in spaces)
            {
                if (entry.Key == null || entry.Value == null) throw new ArgumentNullException("spaces", "a Dict space's key or sub-space is null");
                if (!keys.Add(entry.Key)) throw new ArgumentException("the key '" + entry.Key + "' is given twice", "spaces");
            }
            this.spaces = (KeyValuePair<string, Space>[])spaces.Clone();
        }

        /// <summary>One key and its sub-space, for the constructor: <c>new DictSpace(DictSpace.Entry("zeta", box), ...)</c>.</summary>
        public static KeyValuePair<string, Space> Entry(string key, Space space)
        {
            return new KeyValuePair<string, Space>(key, space);
        }

        public override string Name
        {
            get { return "Dict"; }
        }

        public IReadOnlyList<KeyValuePair<string, Space>> Spaces
        {
            get { return spaces; }
        }

        public override Value Describe()
        {
            var pairs = new Value[spaces.Length];
            for (int i = 0; i < spaces.Length; i++) pairs[i] = Value.List(spaces[i].Key, spaces[i].Value.Describe());
            return Description(Value.Entry("spaces", Value.List(pairs)));
        }

        public override bool Contains(Value value)
        {
            if (value.Kind != ValueKind.Dict || value.Entries.Count != spaces.Length) return false;
            foreach (var entry in spaces)
            {
                Value item = value.Find(entry.Key);
                if (item == null || !entry.Value.Contains(item)) return false;
            }
            return true;
        }
    }

    /// <summary>Gymnasium's <c>Text(max_length, min_length, charset)</c>: strings of characters of the charset.</summary>
    public sealed class TextSpace : Space
    {
        /// <summary>Gymnasium's default charset: ASCII letters and digits.</summary>
        public const string Alphanumeric = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

        public TextSpace(int maxLength, int minLength = 1, string charset = Alphanumeric)
        {
            if (minLength < 0 || maxLength < minLength) throw new ArgumentOutOfRangeException("maxLength", "a Text space has 0 <= min_length <= max_length");
            MaxLength = maxLength;
            MinLength = minLength;
            Charset = charset ?? throw new ArgumentNullException("charset");
        }

        public override string Name
        {
            get { return "Text"; }
        }

        public int MinLength { get; }

        public int MaxLength { get; }

        public string Charset { get; }

        public override Value Describe()
        {
            return Description(Value.Entry("min_length", MinLength), Value.Entry("max_length", MaxLength), Value.Entry("charset", Charset));
        }

        public override bool Contains(Value value)
        {
            if (value.Kind != ValueKind.String) return false;
            string text = value.AsString;
            int length = 0;
            for (int i = 0; i < text.Length; i++)
            {
                string character = char.IsHighSurrogate(text[i]) && i + 1 < text.Length ? text.Substring(i++, 2) : text.Substring(i, 1);
                if (Charset.IndexOf(character, StringComparison.Ordinal) < 0) return false;
                length++;
            }
            return length >= MinLength && length <= MaxLength;
        }
    }

    /// <summary>Gymnasium's <c>Graph(node_space, edge_space)</c>. Its values are <see cref="Value.Graph"/>s; <c>Contains</c> is not implemented for them.</summary>
    public sealed class GraphSpace : Space
    {
        public GraphSpace(Space nodeSpace, Space edgeSpace)
        {
            NodeSpace = nodeSpace ?? throw new ArgumentNullException("nodeSpace");
            EdgeSpace = edgeSpace;
        }

        public override string Name
        {
            get { return "Graph"; }
        }

        public Space NodeSpace { get; }

        /// <summary>The edges' space, or null for a graph without edge features.</summary>
        public Space EdgeSpace { get; }

        public override Value Describe()
        {
            return Description(Value.Entry("node_space", NodeSpace.Describe()), Value.Entry("edge_space", EdgeSpace == null ? Value.None : EdgeSpace.Describe()));
        }

        public override bool Contains(Value value)
        {
            throw new NotSupportedException("graph values are not supported yet");
        }
    }

    /// <summary>Gymnasium's <c>Sequence(feature_space, stack)</c>: tuples (or, stacked, arrays) of any length.</summary>
    public sealed class SequenceSpace : Space
    {
        public SequenceSpace(Space featureSpace, bool stack = false)
        {
            FeatureSpace = featureSpace ?? throw new ArgumentNullException("featureSpace");
            Stack = stack;
        }

        public override string Name
        {
            get { return "Sequence"; }
        }

        public Space FeatureSpace { get; }

        public bool Stack { get; }

        public override Value Describe()
        {
            return Description(Value.Entry("feature_space", FeatureSpace.Describe()), Value.Entry("stack", Stack));
        }

        public override bool Contains(Value value)
        {
            if (Stack) throw new NotSupportedException("stacked sequences are not supported yet");
            if (value.Kind != ValueKind.Tuple) return false;
            foreach (Value item in value.Items)
            {
                if (!FeatureSpace.Contains(item)) return false;
            }
            return true;
        }
    }

    /// <summary>Gymnasium's <c>OneOf(spaces)</c>: a tuple (index, element of spaces[index]).</summary>
    public sealed class OneOfSpace : CompositeSpace
    {
        public OneOfSpace(params Space[] spaces)
            : base(spaces)
        {
            if (spaces.Length == 0) throw new ArgumentException("a OneOf space needs sub-spaces", "spaces");
        }

        public override string Name
        {
            get { return "OneOf"; }
        }

        public override bool Contains(Value value)
        {
            if (value.Kind != ValueKind.Tuple || value.Items.Count != 2 || !IsIntegerLeaf(value.Items[0])) return false;
            long which = value.Items[0].ToInt64();
            return which >= 0 && which < Spaces.Count && Spaces[(int)which].Contains(value.Items[1]);
        }
    }
}
