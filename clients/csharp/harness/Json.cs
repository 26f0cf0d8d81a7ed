using System;
using System.Collections.Generic;
using System.Globalization;
using System.Text;

namespace GymRemote.Harness
{
    /// <summary>A JSON number as written: the harness tells ints from floats by their text, as the protocol does.</summary>
    sealed class JsonNumber
    {
        public JsonNumber(string text)
        {
            Text = text;
        }

        public string Text { get; }

        public bool IsInteger
        {
            get { return Text.IndexOfAny(new[] { '.', 'e', 'E' }) < 0; }
        }
    }

    /// <summary>
    /// A small JSON reader and writer for the harness's lines. A document reads as: null, bool, string,
    /// <see cref="JsonNumber"/>, <c>List&lt;object&gt;</c> for arrays, and <c>List&lt;KeyValuePair&lt;string, object&gt;&gt;</c>
    /// for objects (keys in order).
    /// </summary>
    static class Json
    {
        public static object Parse(string text)
        {
            int position = 0;
            object value = ReadValue(text, ref position, 0);
            SkipSpace(text, ref position);
            if (position != text.Length) throw Error(text, position, "text after the value");
            return value;
        }

        static FormatException Error(string text, int position, string what)
        {
            return new FormatException("invalid JSON at character " + position + ": " + what);
        }

        static void SkipSpace(string text, ref int position)
        {
            while (position < text.Length && (text[position] == ' ' || text[position] == '\t' || text[position] == '\r' || text[position] == '\n')) position++;
        }

        static object ReadValue(string text, ref int position, int depth)
        {
            if (depth > 200) throw Error(text, position, "nested too deeply");
            SkipSpace(text, ref position);
            if (position >= text.Length) throw Error(text, position, "a value is missing");
            char c = text[position];
            if (c == '{')
            {
                position++;
                var entries = new List<KeyValuePair<string, object>>();
                SkipSpace(text, ref position);
                if (position < text.Length && text[position] == '}') { position++; return entries; }
                while (true)
                {
                    SkipSpace(text, ref position);
                    if (position >= text.Length || text[position] != '"') throw Error(text, position, "expected a key");
                    string key = ReadString(text, ref position);
                    SkipSpace(text, ref position);
                    if (position >= text.Length || text[position] != ':') throw Error(text, position, "expected ':'");
                    position++;
                    entries.Add(new KeyValuePair<string, object>(key, ReadValue(text, ref position, depth + 1)));
                    SkipSpace(text, ref position);
                    if (position < text.Length && text[position] == ',') { position++; continue; }
                    if (position < text.Length && text[position] == '}') { position++; return entries; }
                    throw Error(text, position, "expected ',' or '}'");
                }
            }
            if (c == '[')
            {
                position++;
                var items = new List<object>();
                SkipSpace(text, ref position);
                if (position < text.Length && text[position] == ']') { position++; return items; }
                while (true)
                {
                    items.Add(ReadValue(text, ref position, depth + 1));
                    SkipSpace(text, ref position);
                    if (position < text.Length && text[position] == ',') { position++; continue; }
                    if (position < text.Length && text[position] == ']') { position++; return items; }
                    throw Error(text, position, "expected ',' or ']'");
                }
            }
            if (c == '"') return ReadString(text, ref position);
            foreach (var literal in new[] { "null", "true", "false" })
            {
                if (string.CompareOrdinal(text, position, literal, 0, literal.Length) == 0)
                {
                    position += literal.Length;
                    return literal == "null" ? null : (object)(literal == "true");
                }
            }
            int start = position;
            while (position < text.Length && "+-0123456789.eE".IndexOf(text[position]) >= 0) position++;
            if (position == start) throw Error(text, position, "unexpected '" + c + "'");
            return new JsonNumber(text.Substring(start, position - start));
        }

        static string ReadString(string text, ref int position)
        {
            var builder = new StringBuilder();
            position++;  // the opening quote
            while (true)
            {
                if (position >= text.Length) throw Error(text, position, "an unterminated string");
                char c = text[position++];
                if (c == '"') return builder.ToString();
                if (c != '\\')
                {
                    builder.Append(c);
                    continue;
                }
                if (position >= text.Length) throw Error(text, position, "an unterminated escape");
                char escaped = text[position++];
                switch (escaped)
                {
                    case 'n': builder.Append('\n'); break;
                    case 't': builder.Append('\t'); break;
                    case 'r': builder.Append('\r'); break;
                    case 'b': builder.Append('\b'); break;
                    case 'f': builder.Append('\f'); break;
                    case 'u':
                        if (position + 4 > text.Length) throw Error(text, position, "a short \\u escape");
                        builder.Append((char)int.Parse(text.Substring(position, 4), NumberStyles.HexNumber, CultureInfo.InvariantCulture));
                        position += 4;
                        break;
                    default: builder.Append(escaped); break;
                }
            }
        }

        /// <summary>Writes a JSON string, ASCII only (other characters as \u escapes, lone surrogates too).</summary>
        public static void WriteString(StringBuilder builder, string text)
        {
            builder.Append('"');
            foreach (char c in text)
            {
                if (c == '"' || c == '\\') builder.Append('\\').Append(c);
                else if (c < ' ' || c > '~') builder.Append("\\u").Append(((int)c).ToString("x4", CultureInfo.InvariantCulture));
                else builder.Append(c);
            }
            builder.Append('"');
        }
    }
}
