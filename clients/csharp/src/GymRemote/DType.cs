using System;
using System.Collections.Generic;
using System.Globalization;

namespace GymRemote
{
    /// <summary>
    /// A NumPy dtype as the protocol names it (docs/PROTOCOL.md §3.4): its <c>dtype.str</c>, such as
    /// <c>"&lt;f4"</c> or <c>"|b1"</c>. Kinds b i u f c m M U S; no object or void dtypes.
    /// Instances are immutable and compare by their <see cref="Str"/>.
    /// </summary>
    public sealed class DType : IEquatable<DType>
    {
        public static readonly DType Bool = new DType('|', 'b', 1, null);
        public static readonly DType Int8 = new DType('|', 'i', 1, null);
        public static readonly DType Int16 = new DType('<', 'i', 2, null);
        public static readonly DType Int32 = new DType('<', 'i', 4, null);
        public static readonly DType Int64 = new DType('<', 'i', 8, null);
        public static readonly DType UInt8 = new DType('|', 'u', 1, null);
        public static readonly DType UInt16 = new DType('<', 'u', 2, null);
        public static readonly DType UInt32 = new DType('<', 'u', 4, null);
        public static readonly DType UInt64 = new DType('<', 'u', 8, null);
        public static readonly DType Float32 = new DType('<', 'f', 4, null);
        public static readonly DType Float64 = new DType('<', 'f', 8, null);

        /// <summary>The dtypes every client handles (PROTOCOL.md §3.4), in the order the document lists them.</summary>
        public static readonly IReadOnlyList<DType> Core = new[]
        {
            Bool, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64, Float32, Float64,
        };

        static readonly Dictionary<string, DType> Names = new Dictionary<string, DType>
        {
            { "bool", Bool }, { "int8", Int8 }, { "int16", Int16 }, { "int32", Int32 }, { "int64", Int64 },
            { "uint8", UInt8 }, { "uint16", UInt16 }, { "uint32", UInt32 }, { "uint64", UInt64 },
            { "float32", Float32 }, { "float64", Float64 },
        };

        DType(char order, char kind, int itemSize, string unit)
        {
            Order = order;
            Kind = kind;
            ItemSize = itemSize;
            Unit = unit;
            Str = order.ToString() + kind + (kind == 'b' ? "1" : CountText()) + (unit == null ? "" : "[" + unit + "]");
        }

        /// <summary>'&lt;' little-endian, '&gt;' big-endian, '|' not applicable (one-byte items).</summary>
        public char Order { get; }

        /// <summary>NumPy's kind character: b i u f c m M U S.</summary>
        public char Kind { get; }

        /// <summary>Bytes per item.</summary>
        public int ItemSize { get; }

        /// <summary>The unit of a datetime or timedelta dtype ("ns", "s" ...), else null.</summary>
        public string Unit { get; }

        /// <summary>The dtype string, as NumPy's <c>dtype.str</c>.</summary>
        public string Str { get; }

        /// <summary>Whether this is one of the core dtypes.</summary>
        public bool IsCore
        {
            get { return Order != '>' && Kind != 'c' && Kind != 'm' && Kind != 'M' && Kind != 'U' && Kind != 'S' && (Kind != 'f' || ItemSize == 4 || ItemSize == 8); }
        }

        /// <summary>Whether items are integers (kinds i and u).</summary>
        public bool IsInteger
        {
            get { return Kind == 'i' || Kind == 'u'; }
        }

        /// <summary>Whether the bytes are in the opposite order of this machine's.</summary>
        public bool IsSwapped
        {
            get { return Order != '|' && (Order == '>') == BitConverter.IsLittleEndian; }
        }

        /// <summary>
        /// NumPy's <c>np.can_cast(this, to)</c> (casting "safe") for bool, int, uint and float dtypes: every value of
        /// this dtype has an equal value in <paramref name="to"/>. False for other kinds.
        /// </summary>
        public bool CanCastSafely(DType to)
        {
            if (to == null) throw new ArgumentNullException("to");
            if ("biuf".IndexOf(Kind) < 0 || "biuf".IndexOf(to.Kind) < 0) return false;
            if (Kind == 'b') return true;
            switch (to.Kind)
            {
                case 'b': return false;
                case 'i': return Kind == 'i' ? to.ItemSize >= ItemSize : Kind == 'u' && to.ItemSize > ItemSize;
                case 'u': return Kind == 'u' && to.ItemSize >= ItemSize;
                default:  // a float holds ints of up to half its size (int64 into float64, as NumPy allows)
                    return Kind == 'f' ? to.ItemSize >= ItemSize : to.ItemSize > ItemSize || to.ItemSize == 8;
            }
        }

        string CountText()
        {
            return (Kind == 'U' ? ItemSize / 4 : ItemSize).ToString(CultureInfo.InvariantCulture);
        }

        /// <summary>
        /// Reads a dtype string: NumPy's <c>dtype.str</c> form (the byte order may be left out, or be '=' or '|' for this
        /// machine's), or a core dtype's plain name ("float32"). Its <see cref="Str"/> is then NumPy's <c>dtype.str</c>.
        /// Throws <see cref="ArgumentException"/> saying what is wrong for anything else.
        /// </summary>
        public static DType Parse(string text)
        {
            if (text == null) throw new ArgumentNullException("text");
            DType named;
            if (Names.TryGetValue(text, out named)) return named;
            string problem = null;
            DType parsed = TryParse(text, ref problem);
            if (parsed == null) throw new ArgumentException("invalid dtype " + PythonText.Quote(text) + ": " + problem, "text");
            return parsed;
        }

        static DType TryParse(string text, ref string problem)
        {
            // as NumPy reads them: the byte order is optional, '=' and '|' mean this machine's for multi-byte items
            char native = BitConverter.IsLittleEndian ? '<' : '>';
            char order = text.Length > 0 && "<>|=".IndexOf(text[0]) >= 0 ? text[0] : '=';
            if (order == '=' || order == '|') order = native;
            if (text.Length > 0 && "<>|=".IndexOf(text[0]) >= 0) text = text.Substring(1);
            if (text.Length < 2) { problem = "expected a kind and a size, such as \"<f4\""; return null; }
            char kind = text[0];
            if ("biufcmMUS".IndexOf(kind) < 0)
            {
                problem = "kind '" + kind + "' is not one of b i u f c m M U S (object and void dtypes are refused)";
                return null;
            }
            int end = text.IndexOf('[');
            string count = end < 0 ? text.Substring(1) : text.Substring(1, end - 1);
            string unit = null;
            if (end >= 0)
            {
                if ((kind != 'm' && kind != 'M') || !text.EndsWith("]", StringComparison.Ordinal) || end + 2 >= text.Length)
                {
                    problem = "only datetime and timedelta dtypes take a [unit]";
                    return null;
                }
                unit = text.Substring(end + 1, text.Length - end - 2);
                foreach (char c in unit)
                {
                    if (!char.IsLetterOrDigit(c)) { problem = "the unit holds '" + c + "'"; return null; }
                }
            }
            int size;
            if (!int.TryParse(count, NumberStyles.None, CultureInfo.InvariantCulture, out size) || size <= 0)
            {
                problem = "the size must be a positive integer";
                return null;
            }
            if (kind == 'U') size *= 4;
            bool sizeOk;
            switch (kind)
            {
                case 'b': sizeOk = size == 1; break;
                case 'i': case 'u': sizeOk = size == 1 || size == 2 || size == 4 || size == 8; break;
                case 'f': sizeOk = size == 2 || size == 4 || size == 8 || size == 12 || size == 16; break;
                case 'c': sizeOk = size == 8 || size == 16 || size == 24 || size == 32; break;
                case 'm': case 'M': sizeOk = size == 8; break;
                default: sizeOk = true; break;
            }
            if (!sizeOk) { problem = "kind '" + kind + "' has no " + size + "-byte items"; return null; }
            if (size == 1 || kind == 'S') order = '|';
            foreach (DType core in Core)
            {
                if (core.Order == order && core.Kind == kind && core.ItemSize == size) return core;
            }
            return new DType(order, kind, size, unit);
        }

        public bool Equals(DType other)
        {
            return other != null && other.Str == Str;
        }

        public override bool Equals(object obj)
        {
            return Equals(obj as DType);
        }

        public override int GetHashCode()
        {
            return Str.GetHashCode();
        }

        public override string ToString()
        {
            return Str;
        }
    }
}
