using System;
using System.Globalization;
using System.Text;

namespace GymRemote
{
    /// <summary>Python's text for values, for messages that read as the Python env's would.</summary>
    public static class PythonText
    {
        /// <summary>Python's repr of a float: <c>1.0</c>, <c>0.1</c>, <c>nan</c>, <c>-inf</c>.</summary>
        public static string Float(double value)
        {
            if (double.IsNaN(value)) return "nan";
            if (double.IsPositiveInfinity(value)) return "inf";
            if (double.IsNegativeInfinity(value)) return "-inf";
            return Pointed(value.ToString("R", CultureInfo.InvariantCulture));
        }

        static string Pointed(string roundTrip)
        {
            string text = roundTrip.Replace("E", "e");
            return text.IndexOf('.') < 0 && text.IndexOf('e') < 0 ? text + ".0" : text;
        }

        /// <summary>Python's repr of a str, in single quotes.</summary>
        public static string Quote(string text)
        {
            char quote = text.IndexOf('\'') >= 0 && text.IndexOf('"') < 0 ? '"' : '\'';  // as Python chooses
            var builder = new StringBuilder().Append(quote);
            foreach (char c in text)
            {
                if (c == quote || c == '\\') builder.Append('\\').Append(c);
                else if (c == '\n') builder.Append("\\n");
                else if (c < ' ') builder.Append("\\x").Append(((int)c).ToString("x2", CultureInfo.InvariantCulture));
                else builder.Append(c);
            }
            return builder.Append(quote).ToString();
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
                case ValueKind.Bytes:
                    builder.Append("b'");
                    foreach (byte b in value.ToByteArray())
                    {
                        if (b >= 32 && b < 127 && b != '\'' && b != '\\') builder.Append((char)b);
                        else builder.Append("\\x").Append(b.ToString("x2", CultureInfo.InvariantCulture));
                    }
                    builder.Append('\'');
                    break;
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
                    int next = 0;
                    AppendNested(value, value.Shape, 0, ref next, builder);
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
        static void AppendNested(Value value, int[] shape, int axis, ref int next, StringBuilder builder)
        {
            if (axis == shape.Length)
            {
                builder.Append(Item(value, next++));
                return;
            }
            builder.Append('[');
            for (int i = 0; i < shape[axis]; i++)
            {
                if (i > 0) builder.Append(", ");
                AppendNested(value, shape, axis + 1, ref next, builder);
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
                return value.DType.ItemSize == 4 ? Float32(number) : Float(number);
            }
            return "<" + value.DType + ">";
        }

        static string Float32(double number)
        {
            if (double.IsNaN(number) || double.IsInfinity(number)) return Float(number);
            return Pointed(((float)number).ToString("R", CultureInfo.InvariantCulture));
        }
    }
}
