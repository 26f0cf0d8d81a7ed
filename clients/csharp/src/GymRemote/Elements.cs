using System;
using System.Numerics;

namespace GymRemote
{
    /// <summary>Reading and writing one item of a NumPy array's bytes, in the dtype's byte order.</summary>
    static class Elements
    {
        static byte[] Item(DType dtype, byte[] data, int offset)
        {
            var item = new byte[dtype.ItemSize];
            Buffer.BlockCopy(data, offset, item, 0, item.Length);
            if (dtype.IsSwapped) System.Array.Reverse(item);
            return item;
        }

        static void Put(DType dtype, byte[] item, byte[] data, int offset)
        {
            if (dtype.IsSwapped) System.Array.Reverse(item);
            Buffer.BlockCopy(item, 0, data, offset, item.Length);
        }

        public static BigInteger ReadInteger(DType dtype, byte[] data, int offset)
        {
            byte[] item = Item(dtype, data, offset);
            switch (dtype.Kind)
            {
                case 'b': return item[0];
                case 'i':
                    switch (item.Length)
                    {
                        case 1: return (sbyte)item[0];
                        case 2: return BitConverter.ToInt16(item, 0);
                        case 4: return BitConverter.ToInt32(item, 0);
                        default: return BitConverter.ToInt64(item, 0);
                    }
                case 'u':
                    switch (item.Length)
                    {
                        case 1: return item[0];
                        case 2: return BitConverter.ToUInt16(item, 0);
                        case 4: return BitConverter.ToUInt32(item, 0);
                        default: return BitConverter.ToUInt64(item, 0);
                    }
                default:
                    throw new NotSupportedException("the items of a " + dtype + " array are not integers");
            }
        }

        public static double ReadDouble(DType dtype, byte[] data, int offset)
        {
            if (dtype.Kind != 'f') return (double)ReadInteger(dtype, data, offset);
            byte[] item = Item(dtype, data, offset);
            switch (item.Length)
            {
                case 4: return BitConverter.ToSingle(item, 0);
                case 8: return BitConverter.ToDouble(item, 0);
                default: throw new NotSupportedException("reading " + dtype + " items is not supported (only float32 and float64)");
            }
        }

        /// <summary>Writes an integer into a bool, int, uint or float item; it must fit the dtype.</summary>
        public static void WriteInteger(DType dtype, byte[] data, int offset, long value)
        {
            if (dtype.Kind == 'f')
            {
                WriteFloat(dtype, data, offset, value);
                return;
            }
            BigInteger min, max;
            switch (dtype.Kind)
            {
                case 'b': min = 0; max = 1; break;
                case 'i': max = (BigInteger.One << (8 * dtype.ItemSize - 1)) - 1; min = -max - 1; break;
                case 'u': min = 0; max = (BigInteger.One << (8 * dtype.ItemSize)) - 1; break;
                default: throw new ArgumentException("integers cannot be written into a " + dtype + " item");
            }
            if (value < min || value > max) throw new ArgumentOutOfRangeException("value", value + " does not fit " + dtype + " (" + min + " to " + max + ")");
            byte[] item = BitConverter.GetBytes(value);  // two's complement, little-endian on every platform we run on
            if (!BitConverter.IsLittleEndian) System.Array.Reverse(item);
            var sized = new byte[dtype.ItemSize];
            Buffer.BlockCopy(item, 0, sized, 0, sized.Length);
            if (!BitConverter.IsLittleEndian) System.Array.Reverse(sized);
            Put(dtype, sized, data, offset);
        }

        /// <summary>Writes a double into a float32 (rounded to nearest even) or float64 item.</summary>
        public static void WriteFloat(DType dtype, byte[] data, int offset, double value)
        {
            byte[] item;
            if (dtype.Kind == 'f' && dtype.ItemSize == 4) item = BitConverter.GetBytes((float)value);
            else if (dtype.Kind == 'f' && dtype.ItemSize == 8) item = BitConverter.GetBytes(value);
            else throw new ArgumentException("floats can be written into float32 and float64 items, not " + dtype);
            Put(dtype, item, data, offset);
        }
    }
}
