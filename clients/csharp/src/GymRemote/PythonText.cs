using System;
using System.Globalization;
using System.Text;

namespace GymRemote
{
    /// <summary>Python's text for values, for messages that read as the Python env's would.</summary>
    public static class PythonText
    {
        /// <summary>Python's repr of a float: <c>1.0</c>, <c>0.1</c>, <c>1e+16</c>, <c>1e-05</c>, <c>nan</c>, <c>-inf</c>.</summary>
        public static string Float(double value)
        {
            return Shortest(value, 17, text => ReadsAs(text, value));
        }

        /// <summary>NumPy's repr of a float32's value: the shortest digits that read back as the same float32.</summary>
        public static string Float32(float value)
        {
            return Shortest(value, 9, text => ReadsAs(text, value));
        }

        // Whether text reads back as value (as a float32 when value is one); Mono's parser throws on overflow.
        static bool ReadsAs(string text, double value)
        {
            double read;
            return double.TryParse(text, NumberStyles.Float, CultureInfo.InvariantCulture, out read) && read == value;
        }

        static bool ReadsAs(string text, float value)
        {
            float read;
            return float.TryParse(text, NumberStyles.Float, CultureInfo.InvariantCulture, out read) && read == value;
        }

        // The fewest significant digits that read back as the value, written as Python's repr writes them:
        // positional for decimal exponents from -4 to 15, else scientific with a signed two-digit exponent.
        static string Shortest(double value, int maxDigits, Func<string, bool> readsBack)
        {
            if (double.IsNaN(value)) return "nan";
            if (double.IsInfinity(value)) return value > 0 ? "inf" : "-inf";
            if (value == 0) return BitConverter.DoubleToInt64Bits(value) < 0 ? "-0.0" : "0.0";
            string scientific = null;
            for (int digits = 1; digits <= maxDigits; digits++)
            {
                scientific = value.ToString("E" + (digits - 1), CultureInfo.InvariantCulture);
                if (readsBack(scientific)) break;
            }
            int mark = scientific.IndexOf('E');
            int exponent = int.Parse(scientific.Substring(mark + 1), CultureInfo.InvariantCulture);
            string sign = value < 0 ? "-" : "";
            string mantissa = scientific.Substring(0, mark).Replace("-", "").Replace(".", "").TrimEnd('0');
            if (mantissa.Length == 0) mantissa = "0";
            if (exponent < -4 || exponent >= 16)
            {
                string fraction = mantissa.Length > 1 ? "." + mantissa.Substring(1) : "";
                return sign + mantissa[0] + fraction + "e" + (exponent < 0 ? "-" : "+") + Math.Abs(exponent).ToString("00", CultureInfo.InvariantCulture);
            }
            if (exponent < 0) return sign + "0." + new string('0', -exponent - 1) + mantissa;
            if (mantissa.Length <= exponent + 1) return sign + mantissa + new string('0', exponent + 1 - mantissa.Length) + ".0";
            return sign + mantissa.Substring(0, exponent + 1) + "." + mantissa.Substring(exponent + 1);
        }

        /// <summary>Python's repr of a str: in single quotes, or double ones when it holds a single quote and no double one.</summary>
        public static string Quote(string text)
        {
            char quote = text.IndexOf('\'') >= 0 && text.IndexOf('"') < 0 ? '"' : '\'';
            var builder = new StringBuilder().Append(quote);
            for (int i = 0; i < text.Length; i++)
            {
                char c = text[i];
                bool paired = char.IsHighSurrogate(c) && i + 1 < text.Length && char.IsLowSurrogate(text[i + 1]);
                if (paired)
                {
                    builder.Append(c).Append(text[++i]);
                    continue;
                }
                AppendCharacter(builder, c, quote);
            }
            return builder.Append(quote).ToString();
        }

        /// <summary>Python's repr of bytes: <c>b'\x00ab'</c>, quoted as <see cref="Quote"/> quotes.</summary>
        public static string Bytes(byte[] data)
        {
            char quote = Array.IndexOf(data, (byte)'\'') >= 0 && Array.IndexOf(data, (byte)'"') < 0 ? '"' : '\'';
            var builder = new StringBuilder("b").Append(quote);
            foreach (byte b in data) AppendCharacter(builder, b < 127 ? (char)b : (char)0, quote, b);
            return builder.Append(quote).ToString();
        }

        // One character of a str's repr, or of a bytes' repr when code is the byte (then the bytes from 127 up are
        // written as \xhh); characters Python does not print are escaped as \xhh or \uhhhh.
        static void AppendCharacter(StringBuilder builder, char c, char quote, int code = -1)
        {
            if (c == quote || c == '\\') builder.Append('\\').Append(c);
            else if (c == '\n') builder.Append("\\n");
            else if (c == '\r') builder.Append("\\r");
            else if (c == '\t') builder.Append("\\t");
            else if (code >= 0 ? code < 32 || code >= 127 : !Printable(c))
            {
                int value = code >= 0 ? code : c;
                builder.Append(value <= 0xff ? "\\x" : "\\u").Append(value.ToString(value <= 0xff ? "x2" : "x4", CultureInfo.InvariantCulture));
            }
            else builder.Append(c);
        }

        // str.isprintable() for one UTF-16 unit: not a control, format, surrogate, private-use, unassigned or
        // separator character, but for the space
        static bool Printable(char c)
        {
            if (c == ' ') return true;
            switch (char.GetUnicodeCategory(c))
            {
                case UnicodeCategory.Control:
                case UnicodeCategory.Format:
                case UnicodeCategory.Surrogate:
                case UnicodeCategory.PrivateUse:
                case UnicodeCategory.OtherNotAssigned:
                case UnicodeCategory.LineSeparator:
                case UnicodeCategory.ParagraphSeparator:
                case UnicodeCategory.SpaceSeparator:
                    return false;
                default:
                    return true;
            }
        }

        /// <summary>A shape as Python writes a tuple of ints: <c>(2,)</c>, <c>(2, 3)</c>, <c>()</c>.</summary>
        public static string Shape(int[] shape)
        {
            if (shape.Length == 1) return "(" + shape[0] + ",)";
            var parts = new string[shape.Length];
            for (int i = 0; i < shape.Length; i++) parts[i] = shape[i].ToString(CultureInfo.InvariantCulture);
            return "(" + string.Join(", ", parts) + ")";
        }

        /// <summary>NumPy's name of a dtype: float32, int64, bool, uint8 ...</summary>
        public static string NumpyName(DType dtype)
        {
            switch (dtype.Kind)
            {
                case 'b': return "bool";
                case 'i': return "int" + 8 * dtype.ItemSize;
                case 'u': return "uint" + 8 * dtype.ItemSize;
                case 'f': return "float" + 8 * dtype.ItemSize;
                case 'c': return "complex" + 8 * dtype.ItemSize;
                default: return dtype.Str;
            }
        }

        internal static void Append(Value value, StringBuilder builder, int depth)
        {
            if (depth > 64)
            {
                builder.Append("...");
                return;
            }
            switch (value.Kind)
            {
                case ValueKind.None: builder.Append("None"); break;
                case ValueKind.Bool: builder.Append(value.AsBool ? "True" : "False"); break;
                case ValueKind.Int: builder.Append(value.AsInteger.ToString(CultureInfo.InvariantCulture)); break;
                case ValueKind.Float: builder.Append(Float(value.AsFloat)); break;
                case ValueKind.String: builder.Append(Quote(value.AsString)); break;
                case ValueKind.Bytes: builder.Append(Bytes(value.ToByteArray())); break;
                case ValueKind.List:
                case ValueKind.Tuple:
                    bool list = value.Kind == ValueKind.List;
                    builder.Append(list ? '[' : '(');
                    for (int i = 0; i < value.Items.Count; i++)
                    {
                        if (i > 0) builder.Append(", ");
                        Append(value.Items[i], builder, depth + 1);
                    }
                    if (!list && value.Items.Count == 1) builder.Append(',');
                    builder.Append(list ? ']' : ')');
                    break;
                case ValueKind.Graph:
                    string[] names = { "nodes=", ", edges=", ", edge_links=" };
                    builder.Append("GraphInstance(");
                    for (int i = 0; i < names.Length; i++)
                    {
                        builder.Append(names[i]);
                        Append(value.Items[i], builder, depth + 1);
                    }
                    builder.Append(')');
                    break;
                case ValueKind.Dict:
                    builder.Append('{');
                    for (int i = 0; i < value.Entries.Count; i++)
                    {
                        if (i > 0) builder.Append(", ");
                        Append(value.Entries[i].Key, builder, depth + 1);
                        builder.Append(": ");
                        Append(value.Entries[i].Value, builder, depth + 1);
                    }
                    builder.Append('}');
                    break;
                case ValueKind.Scalar:
                    if (value.DType.Kind == 'b') builder.Append(value.GetInteger(0).IsZero ? "np.False_" : "np.True_");
                    else builder.Append("np.").Append(NumpyName(value.DType)).Append('(').Append(Item(value, 0)).Append(')');
                    break;
                case ValueKind.Array:
                    builder.Append("array(");
                    var items = new string[value.Size];
                    int width = 0;
                    for (int i = 0; i < items.Length; i++) width = Math.Max(width, (items[i] = Item(value, i)).Length);
                    if ("biu".IndexOf(value.DType.Kind) >= 0)  // NumPy aligns integers and bools to the right
                    {
                        for (int i = 0; i < items.Length; i++) items[i] = items[i].PadLeft(width);
                    }
                    int next = 0;
                    AppendNested(items, value.Shape, 0, ref next, builder);
                    string name = NumpyName(value.DType);
                    if (name != "int64" && name != "float64" && name != "bool") builder.Append(", dtype=").Append(name);
                    builder.Append(')');
                    break;
                default:
                    builder.Append("array(<").Append(value.Size).Append(" objects>, shape=").Append(Shape(value.Shape)).Append(", dtype=object)");
                    break;
            }
        }

        // NumPy's nesting of brackets by shape (its float padding and summarizing are left out)
        static void AppendNested(string[] items, int[] shape, int axis, ref int next, StringBuilder builder)
        {
            if (axis == shape.Length)
            {
                builder.Append(items[next++]);
                return;
            }
            builder.Append('[');
            for (int i = 0; i < shape[axis]; i++)
            {
                if (i > 0) builder.Append(", ");
                AppendNested(items, shape, axis + 1, ref next, builder);
            }
            builder.Append(']');
        }

        static string Item(Value value, int position)
        {
            char kind = value.DType.Kind;
            if (kind == 'b') return value.GetInteger(position).IsZero ? "False" : "True";
            if (kind == 'i' || kind == 'u') return value.GetInteger(position).ToString(CultureInfo.InvariantCulture);
            if (kind == 'f' && (value.DType.ItemSize == 4 || value.DType.ItemSize == 8))
            {
                double number = value.GetDouble(position);
                return value.DType.ItemSize == 4 ? Float32((float)number) : Float(number);
            }
            return "<" + value.DType + ">";
        }
    }
}
