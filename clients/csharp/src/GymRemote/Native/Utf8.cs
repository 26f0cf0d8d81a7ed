using System;
using System.Runtime.InteropServices;
using System.Text;

namespace GymRemote.Native
{
    // UTF-8 text across the C ABI, by hand: .NET Standard 2.0 marshals no UTF-8 strings (and
    // Marshal.PtrToStringAnsi is the platform's code page, not UTF-8).
    internal static class Utf8
    {
        // strict both ways: a lone surrogate in a C# string, or bytes that are not UTF-8, throw
        static readonly UTF8Encoding Strict = new UTF8Encoding(false, true);

        // The text's UTF-8 bytes (no NUL), for functions taking a pointer and a length.
        internal static byte[] Bytes(string text)
        {
            try
            {
                return Strict.GetBytes(text);
            }
            catch (EncoderFallbackException error)
            {
                throw new ArgumentException("the string " + PythonText.Quote(text) + " holds a lone surrogate, which UTF-8 cannot carry: " + error.Message);
            }
        }

        // A NUL-terminated UTF-8 copy of text for a const char* parameter (null stays null). Refuses a NUL inside,
        // which C would read as the end.
        internal static byte[] Terminated(string text, string what)
        {
            if (text == null) return null;
            if (text.IndexOf('\0') >= 0) throw new ArgumentException(what + " holds a NUL character, which the C interface cannot carry: " + PythonText.Quote(text));
            byte[] bytes = Bytes(text);
            var terminated = new byte[bytes.Length + 1];
            Buffer.BlockCopy(bytes, 0, terminated, 0, bytes.Length);
            return terminated;
        }

        // The text of a NUL-terminated UTF-8 string ("" for a null pointer).
        internal static string Decode(IntPtr text)
        {
            if (text == IntPtr.Zero) return "";
            int length = 0;
            while (Marshal.ReadByte(text, length) != 0) length++;
            return Decode(text, length);
        }

        // The text of `length` bytes of UTF-8 at `text`.
        internal static string Decode(IntPtr text, int length)
        {
            return Strict.GetString(Copy(text, length));
        }

        internal static byte[] Copy(IntPtr data, int length)
        {
            var bytes = new byte[length];
            if (length > 0) Marshal.Copy(data, bytes, 0, length);
            return bytes;
        }
    }
}
