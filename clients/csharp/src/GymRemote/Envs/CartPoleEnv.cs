using System;
using System.Numerics;

namespace GymRemote.Envs
{
    /// <summary>
    /// Gymnasium's <c>gym.make("CartPole-v1")</c> in C# (gymnasium/envs/classic_control/cartpole.py with its
    /// 500-step TimeLimit): the same float operations in the same order, and resets drawn from NumPy's PCG64
    /// seeded as <c>env.np_random</c> is, so that the same seeds and actions give the same bits as in Python.
    /// Its attribute <c>state</c> (a float64 array of 4) can be read and set, as Gymnasium's can.
    /// </summary>
    public sealed class CartPoleEnv : Env
    {
        const double Gravity = 9.8, MassCart = 1.0, MassPole = 0.1, TotalMass = MassPole + MassCart;
        const double Length = 0.5, PoleMassLength = MassPole * Length, ForceMag = 10.0, Tau = 0.02;
        const double XThreshold = 2.4, ThetaThreshold = 12 * 2 * Math.PI / 360;

        /// <summary>The TimeLimit of CartPole-v1: the episode is truncated at this step.</summary>
        public const int MaxEpisodeSteps = 500;

        readonly Space observationSpace;
        readonly Space actionSpace = new DiscreteSpace(2);
        double[] state;  // null until the first reset, as Gymnasium's
        int steps;
        bool terminatedBefore;  // Gymnasium's steps_beyond_terminated is not None
        NumpyRandom random;  // made at the first reset, from the seed or the OS's entropy

        public CartPoleEnv()
        {
            double[] high = { XThreshold * 2, double.PositiveInfinity, ThetaThreshold * 2, double.PositiveInfinity };
            var low = new double[4];
            for (int i = 0; i < 4; i++) low[i] = -high[i];
            observationSpace = new BoxSpace(low, high, DType.Float32);
        }

        public override Space ObservationSpace
        {
            get { return observationSpace; }
        }

        public override Space ActionSpace
        {
            get { return actionSpace; }
        }

        public override string ClassName
        {
            get { return "CartPoleEnv"; }
        }

        public override Value Metadata
        {
            get { return Value.Dict(Value.Entry("render_modes", Value.List("human", "rgb_array")), Value.Entry("render_fps", 50)); }
        }

        /// <summary>The physical state (x, x_dot, theta, theta_dot), or null before the first reset.</summary>
        public double[] State
        {
            get { return state == null ? null : (double[])state.Clone(); }
            set
            {
                if (value != null && value.Length != 4) throw EnvException.ValueError("CartPole's state has 4 numbers, not " + value.Length);
                state = value == null ? null : (double[])value.Clone();
            }
        }

        /// <summary>
        /// As Gymnasium's: the state drawn from uniform(-0.05, 0.05), or from the bounds of
        /// <c>options {"low": .., "high": ..}</c>.
        /// </summary>
        public override ResetResult Reset(BigInteger? seed, Value options)
        {
            double low = Bound(options, "low", -0.05), high = Bound(options, "high", 0.05);
            if (low > high)
            {
                throw EnvException.ValueError("Lower bound (" + PythonText.Float(low) + ") must be lower than higher bound (" + PythonText.Float(high) + ").");
            }
            CheckSeed(seed);
            if (seed.HasValue)
            {
                if (random == null) random = new NumpyRandom(seed.Value);
                else random.Seed(seed.Value);
            }
            else if (random == null)
            {
                random = new NumpyRandom();
            }
            state = new double[4];
            for (int i = 0; i < 4; i++) state[i] = random.Uniform(low, high);
            steps = 0;
            terminatedBefore = false;
            return new ResetResult(Observation(), Value.Dict());
        }

        static double Bound(Value options, string key, double fallback)
        {
            Value given = options == null ? null : options.Find(key);
            if (given == null) return fallback;
            if (given.Kind != ValueKind.Int && given.Kind != ValueKind.Float && given.Kind != ValueKind.Scalar)
            {
                throw EnvException.ValueError("An option is set to " + given.Repr() + " whose type is not a number.");
            }
            return given.ToDouble();
        }

        public override StepResult Step(Value action)
        {
            if (!actionSpace.Contains(action)) throw EnvException.AssertionError(action.Repr() + " (<class '" + action.TypeName() + "'>) invalid");
            if (state == null) throw EnvException.AssertionError("Call reset before using step method.");
            double x = state[0], xDot = state[1], theta = state[2], thetaDot = state[3];
            // Gymnasium's operations in Gymnasium's order, so that the same state steps to the same bits.
            double force = action.ToInt64() == 1 ? ForceMag : -ForceMag;
            double costheta = Math.Cos(theta);
            double sintheta = Math.Sin(theta);
            double temp = (force + PoleMassLength * (thetaDot * thetaDot) * sintheta) / TotalMass;
            double thetaacc = (Gravity * sintheta - costheta * temp) / (Length * (4.0 / 3.0 - MassPole * (costheta * costheta) / TotalMass));
            double xacc = temp - PoleMassLength * thetaacc * costheta / TotalMass;
            x = x + Tau * xDot;  // Euler integration
            xDot = xDot + Tau * xacc;
            theta = theta + Tau * thetaDot;
            thetaDot = thetaDot + Tau * thetaacc;
            state = new[] { x, xDot, theta, thetaDot };
            steps += 1;
            bool terminated = x < -XThreshold || x > XThreshold || theta < -ThetaThreshold || theta > ThetaThreshold;
            double reward = terminatedBefore ? 0.0 : 1.0;  // the step that terminates earns 1, steps after it 0
            terminatedBefore = terminatedBefore || terminated;
            return new StepResult(Observation(), reward, terminated, steps >= MaxEpisodeSteps, Value.Dict());
        }

        public override bool TryGetAttribute(string name, out Value value)
        {
            value = name == "state" ? (state == null ? Value.None : Value.Array(DType.Float64, state)) : null;
            return value != null;
        }

        public override bool TrySetAttribute(string name, Value value)
        {
            if (name != "state") return false;
            State = value.IsNone ? null : value.ToDoubles();
            return true;
        }

        Value Observation()
        {
            return Value.Array(DType.Float32, state);
        }
    }
}
