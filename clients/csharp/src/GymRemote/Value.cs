using System;
using System.Collections.Generic;
using System.Numerics;
using System.Text;

namespace GymRemote
{
    /// <summary>What a <see cref="Value"/> holds: the value types of the protocol (docs/PROTOCOL.md §3).</summary>
    public enum ValueKind
    {
        /// <summary>Python's None (JSON null).</summary>
        None,
        Bool,
        /// <summary>A Python int of any size (beyond 64 bits too).</summary>
        Int,
        /// <summary>A Python float: an IEEE 754 double.</summary>
        Float,
        String,
        Bytes,
        List,
        Tuple,
        /// <summary>A dict; its keys are values (strings, or any other hashable value), in insertion order.</summary>
        Dict,
        /// <summary>A NumPy scalar (<c>np.float32(0.5)</c>): a dtype and the bytes of one item.</summary>
        Scalar,
        /// <summary>A NumPy array: a dtype, a shape and the items' bytes in C order.</summary>
        Array,
        /// <summary>A NumPy array of dtype object: a shape and one value per item, in C order.</summary>
        ObjectArray,
        /// <summary>Gymnasium's <c>GraphInstance</c> (tag <c>g</c>): its <see cref="Value.Items"/> are nodes, edges, edge_links.</summary>
        Graph,
    }

    /// <summary>
    /// An immutable value of the protocol (docs/PROTOCOL.md §3): None, bool, int (any size), float, str,
    /// bytes, list, tuple, dict, NumPy scalar, NumPy array. Lists and tuples are different values, ints
    /// and floats are different values, and a NumPy scalar keeps its dtype, as in Python.
    /// Two values are equal when they are the same value in the strictest sense: same kind, same dtype and
    /// shape, same bits (so NaN equals NaN, -0.0 differs from 0.0, and 1 differs from 1.0 and True), and dicts with
    /// the same entries in the same order. Dict keys are another matter: they are distinct under Python's ==, as in a
    /// Python dict (1, 1.0 and True are one key; see <see cref="PythonKeys"/>).
    /// </summary>
    public sealed class Value : IEquatable<Value>
    {
        // before None, True and False, which the static initializers make with them (in the order written)
        static readonly Value[] NoItems = new Value[0];
        static readonly int[] ScalarShape = new int[0];

        /// <summary>Python's None.</summary>
        public static readonly Value None = new Value(ValueKind.None);
        public static readonly Value True = new Value(ValueKind.Bool) { boolean = true };
        public static readonly Value False = new Value(ValueKind.Bool) { boolean = false };

        bool boolean;
        BigInteger integer;
        double number;
        string text;
        byte[] data;
        Value[] items = NoItems;
        KeyValuePair<Value, Value>[] entries;
        Dictionary<Value, int> index;
        DType dtype;
        int[] shape;
        int hash;

        Value(ValueKind kind)
        {
            Kind = kind;
        }

        /// <summary>What this value holds.</summary>
        public ValueKind Kind { get; }

        // -- making values ------------------------------------------------------------------------------------

        public static Value Bool(bool value)
        {
            return value ? True : False;
        }

        public static Value Int(long value)
        {
            return new Value(ValueKind.Int) { integer = value };
        }

        /// <summary>An int of any size (<c>2**64 + 1</c> too).</summary>
        public static Value Int(BigInteger value)
        {
            return new Value(ValueKind.Int) { integer = value };
        }

        public static Value Float(double value)
        {
            return new Value(ValueKind.Float) { number = value };
        }

        public static Value String(string value)
        {
            if (value == null) throw new ArgumentNullException("value");
            return new Value(ValueKind.String) { text = value };
        }

        /// <summary>Python bytes (the array is copied).</summary>
        public static Value Bytes(byte[] value)
        {
            if (value == null) throw new ArgumentNullException("value");
            return new Value(ValueKind.Bytes) { data = (byte[])value.Clone() };
        }

        public static Value List(params Value[] items)
        {
            return new Value(ValueKind.List) { items = CheckedItems(items) };
        }

        public static Value List(IEnumerable<Value> items)
        {
            return List(new List<Value>(items).ToArray());
        }

        public static Value Tuple(params Value[] items)
        {
            return new Value(ValueKind.Tuple) { items = CheckedItems(items) };
        }

        public static Value Tuple(IEnumerable<Value> items)
        {
            return Tuple(new List<Value>(items).ToArray());
        }

        /// <summary>One entry of a string-keyed dict, for <see cref="Dict(KeyValuePair{string, Value}[])"/>.</summary>
        public static KeyValuePair<string, Value> Entry(string key, Value value)
        {
            return new KeyValuePair<string, Value>(key, value);
        }

        /// <summary>A dict with string keys, in the order given: <c>Value.Dict(Value.Entry("t", 1), ...)</c>.</summary>
        public static Value Dict(params KeyValuePair<string, Value>[] entries)
        {
            return Dict((IEnumerable<KeyValuePair<string, Value>>)entries);
        }

        public static Value Dict(IEnumerable<KeyValuePair<string, Value>> entries)
        {
            var converted = new List<KeyValuePair<Value, Value>>();
            foreach (var entry in entries) converted.Add(new KeyValuePair<Value, Value>(String(entry.Key), entry.Value));
            return Dict(converted);
        }

        /// <summary>
        /// A dict whose keys are any hashable values, in the order given. Two keys equal under Python's == (1, 1.0 and
        /// True; see <see cref="PythonKeys"/>) are refused with an <see cref="ArgumentException"/> naming both, as
        /// docs/PROTOCOL.md §3.1 refuses them in a <c>d</c> value; so is an unhashable key (a list, dict or array).
        /// </summary>
        public static Value Dict(IEnumerable<KeyValuePair<Value, Value>> entries)
        {
            var list = new List<KeyValuePair<Value, Value>>(entries);
            var lookup = new Dictionary<Value, int>(PythonKeys);
            for (int i = 0; i < list.Count; i++)
            {
                if (list[i].Key == null || list[i].Value == null) throw new ArgumentNullException("entries", "a dict entry holds null (use Value.None)");
                int earlier;
                if (lookup.TryGetValue(list[i].Key, out earlier))
                {
                    throw new ArgumentException(
                        "the dict keys " + list[earlier].Key.Repr() + " (entry " + earlier + ") and " + list[i].Key.Repr() + " (entry " + i +
                        ") are equal under Python's ==: a dict holds one of them, not both", "entries");
                }
                lookup.Add(list[i].Key, i);
            }
            return new Value(ValueKind.Dict) { entries = list.ToArray(), index = lookup };
        }

        /// <summary>A NumPy scalar of <paramref name="dtype"/> from the raw bytes of one item (copied).</summary>
        public static Value Scalar(DType dtype, byte[] item)
        {
            if (dtype == null) throw new ArgumentNullException("dtype");
            if (item == null || item.Length != dtype.ItemSize)
            {
                throw new ArgumentException("a " + dtype + " scalar holds " + dtype.ItemSize + " bytes, not " + (item == null ? 0 : item.Length), "item");
            }
            return new Value(ValueKind.Scalar) { dtype = dtype, shape = ScalarShape, data = (byte[])item.Clone() };
        }

        /// <summary>A NumPy scalar of a bool, int or uint dtype (<c>np.int32(3)</c>); the value must fit the dtype.</summary>
        public static Value Scalar(DType dtype, long value)
        {
            var item = new byte[dtype.ItemSize];
            Elements.WriteInteger(dtype, item, 0, value);
            return new Value(ValueKind.Scalar) { dtype = dtype, shape = ScalarShape, data = item };
        }

        /// <summary>A NumPy scalar of a float dtype (<c>np.float32(0.25)</c>), rounded to the dtype as NumPy does.</summary>
        public static Value Scalar(DType dtype, double value)
        {
            var item = new byte[dtype.ItemSize];
            Elements.WriteFloat(dtype, item, 0, value);
            return new Value(ValueKind.Scalar) { dtype = dtype, shape = ScalarShape, data = item };
        }

        /// <summary>A NumPy array of <paramref name="dtype"/> and <paramref name="shape"/> from its items' raw bytes in C order (copied).</summary>
        public static Value Array(DType dtype, int[] shape, byte[] data)
        {
            if (dtype == null) throw new ArgumentNullException("dtype");
            long size = CheckedSize(shape);
            if (data == null || data.LongLength != size * dtype.ItemSize)
            {
                throw new ArgumentException(
                    "an array of " + dtype + " and shape " + PythonText.Shape(shape) + " holds " + size * dtype.ItemSize +
                    " bytes, not " + (data == null ? 0 : data.LongLength), "data");
            }
            return new Value(ValueKind.Array) { dtype = dtype, shape = (int[])shape.Clone(), data = (byte[])data.Clone() };
        }

        /// <summary>A NumPy array of a float dtype from doubles (each rounded to the dtype), shape (n,) unless given.</summary>
        public static Value Array(DType dtype, double[] values, params int[] shape)
        {
            return Filled(dtype, values.Length, shape, (bytes, i) => Elements.WriteFloat(dtype, bytes, i * dtype.ItemSize, values[i]));
        }

        // an array of count items, each written by write(bytes, index)
        static Value Filled(DType dtype, int count, int[] shape, Action<byte[], int> write)
        {
            int[] actual = ShapeFor(count, shape);
            var bytes = new byte[count * dtype.ItemSize];
            for (int i = 0; i < count; i++) write(bytes, i);
            return new Value(ValueKind.Array) { dtype = dtype, shape = actual, data = bytes };
        }

        /// <summary>A NumPy array of a float32 from floats, shape (n,) unless given.</summary>
        public static Value Array(float[] values, params int[] shape)
        {
            var doubles = new double[values.Length];
            for (int i = 0; i < values.Length; i++) doubles[i] = values[i];
            return Array(DType.Float32, doubles, shape);
        }

        /// <summary>A NumPy array of a bool, int or uint dtype from integers (each must fit), shape (n,) unless given.</summary>
        public static Value Array(DType dtype, long[] values, params int[] shape)
        {
            return Filled(dtype, values.Length, shape, (bytes, i) => Elements.WriteInteger(dtype, bytes, i * dtype.ItemSize, values[i]));
        }

        /// <summary>
        /// Gymnasium's <c>GraphInstance(nodes, edges, edge_links)</c>: <paramref name="nodes"/> an array
        /// (n_nodes, *node_shape), <paramref name="edges"/> an array (n_edges, *edge_shape) or None,
        /// <paramref name="edgeLinks"/> an int array (n_edges, 2) or None.
        /// </summary>
        public static Value Graph(Value nodes, Value edges, Value edgeLinks)
        {
            if (nodes == null || nodes.Kind != ValueKind.Array) throw new ArgumentException("a graph's nodes are an array, not " + (nodes == null ? "null" : nodes.Repr()), "nodes");
            foreach (Value part in new[] { edges, edgeLinks })
            {
                if (part == null || (part.Kind != ValueKind.Array && part.Kind != ValueKind.None))
                {
                    throw new ArgumentException("a graph's edges and edge_links are arrays or None, not " + (part == null ? "null" : part.Repr()));
                }
            }
            return new Value(ValueKind.Graph) { items = new[] { nodes, edges, edgeLinks } };
        }

        /// <summary>A NumPy array of dtype object: one value per item, in C order.</summary>
        public static Value ObjectArray(int[] shape, params Value[] items)
        {
            long size = CheckedSize(shape);
            if (items == null || items.Length != size) throw new ArgumentException("an object array of shape " + PythonText.Shape(shape) + " holds " + size + " items", "items");
            return new Value(ValueKind.ObjectArray) { shape = (int[])shape.Clone(), items = CheckedItems(items) };
        }

        public static implicit operator Value(bool value)
        {
            return Bool(value);
        }

        public static implicit operator Value(long value)
        {
            return Int(value);
        }

        public static implicit operator Value(BigInteger value)
        {
            return Int(value);
        }

        public static implicit operator Value(double value)
        {
            return Float(value);
        }

        public static implicit operator Value(string value)
        {
            return String(value);
        }

        static Value[] CheckedItems(Value[] items)
        {
            if (items == null) throw new ArgumentNullException("items");
            foreach (Value item in items)
            {
                if (item == null) throw new ArgumentNullException("items", "an item is null (use Value.None)");
            }
            return (Value[])items.Clone();
        }

        static long CheckedSize(int[] shape)
        {
            if (shape == null) throw new ArgumentNullException("shape");
            if (shape.Length > 32) throw new ArgumentException("a shape has at most 32 dimensions, not " + shape.Length, "shape");
            long size = 1;
            foreach (int extent in shape)
            {
                if (extent < 0) throw new ArgumentException("the shape " + PythonText.Shape(shape) + " has a negative extent", "shape");
                size = checked(size * extent);
            }
            return size;
        }

        static int[] ShapeFor(int count, int[] shape)
        {
            if (shape == null || shape.Length == 0) return new[] { count };
            if (CheckedSize(shape) != count) throw new ArgumentException(count + " items do not fill the shape " + PythonText.Shape(shape), "shape");
            return (int[])shape.Clone();
        }

        // -- reading values -----------------------------------------------------------------------------------

        public bool IsNone
        {
            get { return Kind == ValueKind.None; }
        }

        /// <summary>The bool of a <see cref="ValueKind.Bool"/>.</summary>
        public bool AsBool
        {
            get { Expect(ValueKind.Bool); return boolean; }
        }

        /// <summary>The int of a <see cref="ValueKind.Int"/>, of any size.</summary>
        public BigInteger AsInteger
        {
            get { Expect(ValueKind.Int); return integer; }
        }

        /// <summary>The double of a <see cref="ValueKind.Float"/>.</summary>
        public double AsFloat
        {
            get { Expect(ValueKind.Float); return number; }
        }

        /// <summary>The string of a <see cref="ValueKind.String"/>.</summary>
        public string AsString
        {
            get { Expect(ValueKind.String); return text; }
        }

        /// <summary>A copy of the bytes of a <see cref="ValueKind.Bytes"/>, or of the raw data of a scalar or array.</summary>
        public byte[] ToByteArray()
        {
            if (Kind != ValueKind.Bytes && Kind != ValueKind.Scalar && Kind != ValueKind.Array) Expect(ValueKind.Bytes);
            return (byte[])data.Clone();
        }

        /// <summary>The items of a list, tuple or object array, or a graph's nodes, edges and edge_links (empty for other kinds).</summary>
        public IReadOnlyList<Value> Items
        {
            get { return items; }
        }

        /// <summary>The entries of a dict, in order (empty for other kinds).</summary>
        public IReadOnlyList<KeyValuePair<Value, Value>> Entries
        {
            get { return entries ?? new KeyValuePair<Value, Value>[0]; }
        }

        /// <summary>The dtype of a scalar or array, else null.</summary>
        public DType DType
        {
            get { return dtype; }
        }

        /// <summary>The shape of an array or object array (a copy; empty for a scalar), else null.</summary>
        public int[] Shape
        {
            get { return shape == null ? null : (int[])shape.Clone(); }
        }

        /// <summary>The number of items of an array, scalar (1) or object array.</summary>
        public int Size
        {
            get
            {
                if (Kind == ValueKind.ObjectArray) return items.Length;
                if (Kind == ValueKind.Array || Kind == ValueKind.Scalar) return data.Length / dtype.ItemSize;
                throw WrongKind("an array or scalar");
            }
        }

        /// <summary>
        /// The value under <paramref name="key"/> in a dict, found as Python finds it (a key equal under ==: 1 finds
        /// True, "offset" finds <c>np.str_("offset")</c>), or null when the key is absent (or this is no dict).
        /// </summary>
        public Value Find(Value key)
        {
            int position;
            if (index != null && index.TryGetValue(key, out position)) return entries[position].Value;
            return null;
        }

        /// <summary>The value under the string <paramref name="key"/> in a dict, or null.</summary>
        public Value Find(string key)
        {
            return Find(String(key));
        }

        /// <summary>Item <paramref name="position"/> (C order) of a bool, int, uint or float array or scalar, as a double.</summary>
        public double GetDouble(int position)
        {
            CheckElement(position);
            return Elements.ReadDouble(dtype, data, position * dtype.ItemSize);
        }

        /// <summary>Item <paramref name="position"/> (C order) of a bool, int or uint array or scalar.</summary>
        public BigInteger GetInteger(int position)
        {
            CheckElement(position);
            return Elements.ReadInteger(dtype, data, position * dtype.ItemSize);
        }

        /// <summary>
        /// NumPy's <c>.item(position)</c> for a bool, int, uint or float32/float64 array or scalar: item
        /// <paramref name="position"/> (C order) as the Python bool, int or float it becomes.
        /// </summary>
        public Value Item(int position)
        {
            CheckElement(position);
            switch (dtype.Kind)
            {
                case 'b': return Bool(!GetInteger(position).IsZero);
                case 'i':
                case 'u': return Int(GetInteger(position));
                case 'f': return Float(GetDouble(position));
                default: throw new NotSupportedException("the items of a " + dtype + " array are not read as Python numbers here");
            }
        }

        void CheckElement(int position)
        {
            if (Kind != ValueKind.Array && Kind != ValueKind.Scalar) throw WrongKind("an array or scalar");
            if (position < 0 || position >= Size) throw new ArgumentOutOfRangeException("position", "index " + position + " is out of bounds for size " + Size);
        }

        // -- conversions with Python's rules, for envs reading their actions and options ------------------------

        /// <summary>
        /// <c>int(x)</c>: a bool, an int within 64 bits, a finite float (truncated), or a numeric NumPy scalar or
        /// 0-d array. Anything else raises an <see cref="EnvException"/> (TypeError, ValueError or OverflowError).
        /// </summary>
        public long ToInt64()
        {
            BigInteger whole;
            switch (Kind)
            {
                case ValueKind.Bool: return boolean ? 1 : 0;
                case ValueKind.Int: whole = integer; break;
                case ValueKind.Float: whole = Truncate(number); break;
                case ValueKind.Scalar:
                case ValueKind.Array:
                    if (Kind == ValueKind.Array && shape.Length != 0)
                    {
                        throw EnvException.TypeError("only 0-dimensional arrays can be converted to Python scalars, not " + Repr());
                    }
                    if (!IsNumeric) throw EnvException.TypeError("int() argument must be a number, not " + TypeName());
                    return Item(0).ToInt64();
                default:
                    throw EnvException.TypeError("int() argument must be a string, a bytes-like object or a real number, not '" + TypeName() + "'");
            }
            if (whole < long.MinValue || whole > long.MaxValue) throw new EnvException("OverflowError", "Python int too large to convert to C long: " + whole);
            return (long)whole;
        }

        /// <summary><c>float(x)</c>: a bool, an int, a float, or a numeric NumPy scalar or 0-d array.</summary>
        public double ToDouble()
        {
            switch (Kind)
            {
                case ValueKind.Bool: return boolean ? 1.0 : 0.0;
                case ValueKind.Int: return (double)integer;
                case ValueKind.Float: return number;
                case ValueKind.Scalar:
                case ValueKind.Array:
                    if (Kind == ValueKind.Array && shape.Length != 0)
                    {
                        throw EnvException.TypeError("only 0-dimensional arrays can be converted to Python scalars, not " + Repr());
                    }
                    return Item(0).ToDouble();
                default:
                    throw EnvException.TypeError("float() argument must be a string or a real number, not '" + TypeName() + "'");
            }
        }

        /// <summary>
        /// <c>np.asarray(x, dtype=np.float64).ravel()</c>: the items of a numeric array or scalar, or of a (nested)
        /// list or tuple of numbers, in C order.
        /// </summary>
        public double[] ToDoubles()
        {
            var result = new List<double>();
            Flatten(this, result, 0);
            return result.ToArray();
        }

        /// <summary><c>np.asarray(x).ravel()</c> as Python ints: the items of an integer/bool array, or of a list or tuple of ints.</summary>
        public long[] ToInt64s()
        {
            if (Kind == ValueKind.Array || Kind == ValueKind.Scalar)
            {
                var values = new long[Size];
                for (int i = 0; i < values.Length; i++) values[i] = Item(i).ToInt64();
                return values;
            }
            var flat = new List<long>();
            foreach (Value item in FlatItems()) flat.Add(item.ToInt64());
            return flat.ToArray();
        }

        IEnumerable<Value> FlatItems()
        {
            if (Kind != ValueKind.List && Kind != ValueKind.Tuple)
            {
                yield return this;
                yield break;
            }
            foreach (Value item in items)
            {
                foreach (Value leaf in item.FlatItems()) yield return leaf;
            }
        }

        static void Flatten(Value value, List<double> into, int depth)
        {
            if (depth > 64) throw EnvException.ValueError("a value nested deeper than 64 levels cannot be an array");
            switch (value.Kind)
            {
                case ValueKind.List:
                case ValueKind.Tuple:
                    foreach (Value item in value.items) Flatten(item, into, depth + 1);
                    return;
                case ValueKind.Array:
                case ValueKind.Scalar:
                    for (int i = 0; i < value.Size; i++) into.Add(value.GetDouble(i));
                    return;
                default:
                    into.Add(value.ToDouble());
                    return;
            }
        }

        static BigInteger Truncate(double value)
        {
            if (double.IsNaN(value)) throw EnvException.ValueError("cannot convert float NaN to integer");
            if (double.IsInfinity(value)) throw new EnvException("OverflowError", "cannot convert float infinity to integer");
            return new BigInteger(Math.Truncate(value));
        }

        // a bool, int, uint or float dtype (whose items are Python numbers)
        bool IsNumeric
        {
            get { return dtype.Kind == 'b' || dtype.IsInteger || dtype.Kind == 'f'; }
        }

        void Expect(ValueKind kind)
        {
            if (Kind != kind) throw WrongKind("a " + kind);
        }

        InvalidOperationException WrongKind(string wanted)
        {
            return new InvalidOperationException("the value " + Repr() + " is " + Kind + ", not " + wanted);
        }

        // -- equality and text --------------------------------------------------------------------------------

        public bool Equals(Value other)
        {
            if (ReferenceEquals(this, other)) return true;
            if (other == null || other.Kind != Kind) return false;
            switch (Kind)
            {
                case ValueKind.None: return true;
                case ValueKind.Bool: return boolean == other.boolean;
                case ValueKind.Int: return integer == other.integer;
                case ValueKind.Float: return BitConverter.DoubleToInt64Bits(number) == BitConverter.DoubleToInt64Bits(other.number);
                case ValueKind.String: return text == other.text;
                case ValueKind.Bytes: return SameBytes(data, other.data);
                case ValueKind.List:
                case ValueKind.Tuple:
                case ValueKind.Graph: return SameItems(items, other.items);
                case ValueKind.ObjectArray: return SameShape(shape, other.shape) && SameItems(items, other.items);
                case ValueKind.Scalar:
                case ValueKind.Array: return dtype.Equals(other.dtype) && SameShape(shape, other.shape) && SameBytes(data, other.data);
                case ValueKind.Dict:
                    if (entries.Length != other.entries.Length) return false;
                    for (int i = 0; i < entries.Length; i++)
                    {
                        if (!entries[i].Key.Equals(other.entries[i].Key) || !entries[i].Value.Equals(other.entries[i].Value)) return false;
                    }
                    return true;
                default: return false;
            }
        }

        public override bool Equals(object obj)
        {
            return Equals(obj as Value);
        }

        public override int GetHashCode()
        {
            if (hash != 0) return hash;
            int h = (int)Kind * 397;
            switch (Kind)
            {
                case ValueKind.Bool: h ^= boolean ? 1 : 2; break;
                case ValueKind.Int: h ^= integer.GetHashCode(); break;
                case ValueKind.Float: h ^= BitConverter.DoubleToInt64Bits(number).GetHashCode(); break;
                case ValueKind.String: h ^= text.GetHashCode(); break;
                case ValueKind.Scalar:
                case ValueKind.Array:
                case ValueKind.Bytes:
                    foreach (byte b in data) h = h * 31 + b;
                    break;
                default:
                    foreach (Value item in items) h = h * 31 + item.GetHashCode();
                    if (entries != null)
                    {
                        foreach (var entry in entries) h = h * 31 + entry.Key.GetHashCode() * 7 + entry.Value.GetHashCode();
                    }
                    break;
            }
            hash = h == 0 ? 1 : h;
            return hash;
        }

        static bool SameBytes(byte[] a, byte[] b)
        {
            if (a.Length != b.Length) return false;
            for (int i = 0; i < a.Length; i++)
            {
                if (a[i] != b[i]) return false;
            }
            return true;
        }

        static bool SameShape(int[] a, int[] b)
        {
            if (a.Length != b.Length) return false;
            for (int i = 0; i < a.Length; i++)
            {
                if (a[i] != b[i]) return false;
            }
            return true;
        }

        static bool SameItems(Value[] a, Value[] b)
        {
            if (a.Length != b.Length) return false;
            for (int i = 0; i < a.Length; i++)
            {
                if (!a[i].Equals(b[i])) return false;
            }
            return true;
        }

        // -- dict keys under Python's == (docs/PROTOCOL.md §3.1) ----------------------------------------------------

        /// <summary>
        /// Compares dict keys as a Python dict does, under Python's ==: numbers are equal when their values are,
        /// whatever their types (1, 1.0, True and <c>np.int8(1)</c> are one key; 0, -0.0 and False are one key;
        /// <c>np.float32(0.1)</c> is not 0.1, whose value differs), NaN equals nothing, a str equals a NumPy str
        /// scalar (<c>&lt;U</c>) of the same text and bytes a NumPy bytes scalar (<c>|S</c>), tuples are equal when
        /// their items are, and None equals None. Hashes agree with this equality. Keys must be hashable: a list,
        /// dict or array (or a tuple holding one) throws <see cref="ArgumentException"/>; a NumPy scalar of a dtype
        /// outside the core dtypes, <c>U</c> and <c>S</c> (float16, complex, datetime) throws
        /// <see cref="NotSupportedException"/>.
        /// </summary>
        public static IEqualityComparer<Value> PythonKeys
        {
            get { return PythonKeyComparer.Instance; }
        }

        /// <summary>Whether <paramref name="left"/> and <paramref name="right"/> are one key of a Python dict (<see cref="PythonKeys"/>).</summary>
        public static bool PythonKeyEquals(Value left, Value right)
        {
            return PythonKeys.Equals(left, right);
        }

        sealed class PythonKeyComparer : IEqualityComparer<Value>
        {
            internal static readonly PythonKeyComparer Instance = new PythonKeyComparer();

            // what a key is compared as: a number, a text (str), bytes, a tuple of keys, or None
            enum Form { None, Number, Text, Bytes, Tuple }

            public bool Equals(Value left, Value right)
            {
                if (left == null || right == null) return left == null && right == null;
                Form form = FormOf(left);
                if (form != FormOf(right)) return false;
                switch (form)
                {
                    case Form.None: return true;
                    case Form.Text: return string.Equals(TextOf(left), TextOf(right), StringComparison.Ordinal);
                    case Form.Bytes: return SameBytes(BytesOf(left), BytesOf(right));
                    case Form.Tuple:
                        if (left.items.Length != right.items.Length) return false;
                        for (int i = 0; i < left.items.Length; i++)
                        {
                            if (!Equals(left.items[i], right.items[i])) return false;
                        }
                        return true;
                    default:
                        BigInteger leftWhole, rightWhole;
                        double leftReal, rightReal;
                        bool leftIsWhole = NumberOf(left, out leftWhole, out leftReal), rightIsWhole = NumberOf(right, out rightWhole, out rightReal);
                        if (leftIsWhole != rightIsWhole) return false;  // a float with a fraction (or NaN, or infinite) is no integer
                        return leftIsWhole ? leftWhole == rightWhole : leftReal == rightReal;  // (NaN != NaN)
                }
            }

            public int GetHashCode(Value key)
            {
                if (key == null) return 0;
                switch (FormOf(key))
                {
                    case Form.None: return 17;
                    case Form.Text: return TextOf(key).GetHashCode();
                    case Form.Bytes:
                        int h = 19;
                        foreach (byte b in BytesOf(key)) h = h * 31 + b;
                        return h;
                    case Form.Tuple:
                        int combined = 23;
                        foreach (Value item in key.items) combined = combined * 31 + GetHashCode(item);
                        return combined;
                    default:
                        BigInteger whole;
                        double real;
                        return NumberOf(key, out whole, out real) ? whole.GetHashCode() : real.GetHashCode();
                }
            }

            static Form FormOf(Value key)
            {
                switch (key.Kind)
                {
                    case ValueKind.None: return Form.None;
                    case ValueKind.Bool:
                    case ValueKind.Int:
                    case ValueKind.Float: return Form.Number;
                    case ValueKind.String: return Form.Text;
                    case ValueKind.Bytes: return Form.Bytes;
                    case ValueKind.Tuple:
                        foreach (Value item in key.items) FormOf(item);  // a tuple is hashable when its items are
                        return Form.Tuple;
                    case ValueKind.Scalar:
                        if (key.dtype.Kind == 'U') return Form.Text;
                        if (key.dtype.Kind == 'S') return Form.Bytes;
                        if (key.IsNumeric && (key.dtype.Kind != 'f' || key.dtype.ItemSize == 4 || key.dtype.ItemSize == 8)) return Form.Number;
                        throw new NotSupportedException("a dict key of dtype " + key.dtype + " cannot be compared under Python's == here (only bool, int, uint, float32, float64, U and S)");
                    default:
                        throw new ArgumentException("unhashable type: '" + key.TypeName() + "' cannot be a dict key (" + key.Repr() + ")");
                }
            }

            // An integral number as an exact integer (true), or else a float's double (false): NaN, an infinity, or
            // a float with a fraction, none of which equals an integer.
            static bool NumberOf(Value key, out BigInteger whole, out double real)
            {
                Value number = key.Kind == ValueKind.Scalar ? key.Item(0) : key;
                whole = BigInteger.Zero;
                real = 0;
                switch (number.Kind)
                {
                    case ValueKind.Bool: whole = number.boolean ? BigInteger.One : BigInteger.Zero; return true;
                    case ValueKind.Int: whole = number.integer; return true;
                    default:
                        real = number.number;
                        if (double.IsNaN(real) || double.IsInfinity(real) || Math.Floor(real) != real) return false;
                        whole = new BigInteger(real);
                        return true;
                }
            }

            // NumPy's str and bytes scalars end at their last non-NUL character or byte, as np.str_ and np.bytes_ do
            static string TextOf(Value key)
            {
                if (key.Kind == ValueKind.String) return key.text;
                var builder = new StringBuilder();
                int count = key.data.Length / 4;
                while (count > 0 && CodePoint(key, count - 1) == 0) count--;
                for (int i = 0; i < count; i++)
                {
                    uint code = CodePoint(key, i);
                    if (code > 0x10FFFF) throw new ArgumentException("the " + key.dtype + " key holds " + code + ", which is no code point");
                    if (code >= 0xD800 && code <= 0xDFFF) builder.Append((char)code);  // a lone surrogate, as Python's str holds it
                    else builder.Append(char.ConvertFromUtf32((int)code));
                }
                return builder.ToString();
            }

            static uint CodePoint(Value key, int position)
            {
                var item = new byte[4];
                Buffer.BlockCopy(key.data, 4 * position, item, 0, 4);
                if (key.dtype.IsSwapped) System.Array.Reverse(item);
                return BitConverter.ToUInt32(item, 0);
            }

            static byte[] BytesOf(Value key)
            {
                if (key.Kind == ValueKind.Bytes) return key.data;
                int count = key.data.Length;
                while (count > 0 && key.data[count - 1] == 0) count--;
                var bytes = new byte[count];
                Buffer.BlockCopy(key.data, 0, bytes, 0, count);
                return bytes;
            }
        }

        /// <summary>The name of the Python type this value is: "int", "tuple", "numpy.float32", "numpy.ndarray" ...</summary>
        public string TypeName()
        {
            switch (Kind)
            {
                case ValueKind.None: return "NoneType";
                case ValueKind.Bool: return "bool";
                case ValueKind.Int: return "int";
                case ValueKind.Float: return "float";
                case ValueKind.String: return "str";
                case ValueKind.Bytes: return "bytes";
                case ValueKind.List: return "list";
                case ValueKind.Tuple: return "tuple";
                case ValueKind.Dict: return "dict";
                case ValueKind.Scalar: return "numpy." + PythonText.NumpyName(dtype);
                case ValueKind.Graph: return "GraphInstance";
                default: return "numpy.ndarray";
            }
        }

        /// <summary>Python's repr of the value (for messages): <c>(1, 'x')</c>, <c>np.float32(0.5)</c>, <c>array([1, 2], dtype=int16)</c>.</summary>
        public string Repr()
        {
            var builder = new StringBuilder();
            PythonText.Append(this, builder, 0);
            return builder.ToString();
        }

        public override string ToString()
        {
            return Repr();
        }
    }
}
