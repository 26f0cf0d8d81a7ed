using System.Runtime.CompilerServices;

// the harness tests the native value conversion (GymRemote.Native.NativeValues), which is internal
[assembly: InternalsVisibleTo("GymRemote.Harness")]
