using System;

namespace GymRemote
{
    /// <summary>What a client function returned: gym_remote.h's gr_status codes.</summary>
    public enum ClientStatus
    {
        Ok = 0,
        /// <summary>The caller's mistake: a bad option, key file, handle or value.</summary>
        InvalidArgument = 1,
        ProtocolError = 2,
        EnvError = 3,
        EncodeError = 4,
        /// <summary>The server refused the client for good.</summary>
        Refused = 5,
        /// <summary>The server does not accept this client's key.</summary>
        Unauthorized = 6,
        /// <summary>The security handshake keeps failing (wrong server key or secret).</summary>
        HandshakeFailed = 7,
        /// <summary>No server answered in time, or no slot freed up in time.</summary>
        Timeout = 8,
        /// <summary>The server went away and reconnecting is off (or gave up).</summary>
        Lost = 9,
        /// <summary><see cref="Client.RequestStop"/> was called: the client said BYE and left.</summary>
        Stopped = 10,
        Internal = 11,
        Pending = 12,
    }

    /// <summary>Where a client stands: gym_remote.h's GR_STATE_* values.</summary>
    public enum ClientState
    {
        New = 0,
        /// <summary>Saying HELLO, waiting for the WELCOME.</summary>
        Connecting = 1,
        /// <summary>The server is full: waiting in line for a slot.</summary>
        InLine = 2,
        /// <summary>Serving slots.</summary>
        Member = 3,
        /// <summary>The server went away: joining again as a new session.</summary>
        Rejoining = 4,
        /// <summary>Ended: the server closed (<see cref="ClientStatus.Ok"/>) or the client was stopped.</summary>
        Closed = 5,
        /// <summary>Ended: the server refused the client.</summary>
        Refused = 6,
        /// <summary>Ended: another failure (<see cref="Client.Error"/> says what).</summary>
        Failed = 7,
    }

    /// <summary>The level of a log line of the native client.</summary>
    public enum LogLevel
    {
        Debug = 0,
        Info = 1,
        Warning = 2,
        Error = 3,
    }

    /// <summary>A failure of the native client that is not an env's error; <see cref="Status"/> says which.</summary>
    public class GymRemoteException : Exception
    {
        public GymRemoteException(ClientStatus status, string message)
            : base(message)
        {
            Status = status;
        }

        public ClientStatus Status { get; }
    }

    /// <summary>
    /// How a <see cref="Client"/> connects: the options of <c>gym-remote client</c>. Durations are in seconds; null
    /// keeps the native default (connect 120 s, slot 3600 s, reconnect 300 s, liveness 10 s, no spin).
    /// </summary>
    public sealed class ClientOptions
    {
        public ClientOptions(string endpoint)
        {
            Endpoint = endpoint;
        }

        /// <summary>"tcp://HOST:PORT" or "ipc://PATH".</summary>
        public string Endpoint { get; set; }

        /// <summary>For logs and the server's client table (null: host:pid).</summary>
        public string Name { get; set; }

        /// <summary>Wait this long for the server's answer to the first HELLO (&lt;= 0: forever).</summary>
        public double? ConnectTimeout { get; set; }

        /// <summary>Wait in line for a slot at most this long (&lt;= 0: forever).</summary>
        public double? SlotTimeout { get; set; }

        /// <summary>Try to rejoin a server that went away for this long (&lt;= 0: forever).</summary>
        public double? ReconnectTimeout { get; set; }

        /// <summary>Silence after which the server counts as gone (finite, &gt; 0).</summary>
        public double? LivenessTimeout { get; set; }

        /// <summary>Over the data plane, busy-check this long for the next command (0: never).</summary>
        public double? Spin { get; set; }

        /// <summary>No free slot: wait in line (true, the default) or fail.</summary>
        public bool WaitForSlot { get; set; } = true;

        /// <summary>Rejoin a server that went away (true, the default) or fail.</summary>
        public bool Reconnect { get; set; } = true;

        /// <summary>The same-host data plane (PROTOCOL.md §13) on or off; null: on unless GYM_REMOTE_DATA_PLANE says off.</summary>
        public bool? DataPlane { get; set; }

        /// <summary>CURVE: the server's NAME.key file, or its public key as 40 characters of Z85.</summary>
        public string ServerKey { get; set; }

        /// <summary>CURVE: this client's NAME.key_secret file, or its secret key in Z85.</summary>
        public string ClientKey { get; set; }

        /// <summary>A shared secret (its text), instead of key files.</summary>
        public string Secret { get; set; }

        /// <summary>A file holding the shared secret (surrounding whitespace stripped); takes precedence over the rest.</summary>
        public string SecretFile { get; set; }

        /// <summary>The native client's log level (process-wide); null leaves it (warnings and up by default).</summary>
        public LogLevel? LogLevel { get; set; }
    }
}
