// e^x in double by Tang's table-driven method, the one exponential of the CPU attention (reference and vectorized
// kernel) and of vec_ops' lanes: exp_table below for one double, vec_ops.cpp's exp_lanes for a vector, the same
// operations in the same order, each multiply-add a fused one (std::fma, correctly rounded wherever it runs),
// hence the same bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace xtrain::cpu {

// kExp2Sixteenths[j] = 2^(j/16), j in [0, 16), each the double nearest the exact value (relative error <= 2^-53;
// printed with 17 significant digits, which round-trip a double).
alignas(64) inline constexpr double kExp2Sixteenths[16] = {
    1.0,
    1.0442737824274138,
    1.0905077326652577,
    1.1387886347566916,
    1.1892071150027210,
    1.2418578120734840,
    1.2968395546510096,
    1.3542555469368927,
    1.4142135623730951,
    1.4768261459394993,
    1.5422108254079407,
    1.6104903319492543,
    1.6817928305074290,
    1.7562521603732995,
    1.8340080864093424,
    1.9152065613971474,
};

// The method's constants. x = (16 n + j) ln2/16 + r, k = 16 n + j = round(16 x / ln2), |r| <= ln2/32; ln2/16 in
// two parts (Cody & Waite; fdlibm's e_exp.c split of ln2, scaled by 1/16), so that k ln2hi/16 is exact for
// |k| < 2^21. The shifter: adding it to a double below 2^51 rounds it to an integer, kept in the low mantissa bits.
inline constexpr double kExpLo = -708.0, kExpHi = 709.0;  // the clamp: e^-708 ~ 3e-308, 2^1023 bounds the scale
inline constexpr double kExpShifter = 0x1.8p52;
inline constexpr double kExpSixteenOverLn2 = 16.0 * 0x1.71547652b82fep0;
inline constexpr double kExpLn2HiOver16 = 0x1.62e42fee00000p-1 / 16.0, kExpLn2LoOver16 = 0x1.a39ef35793c76p-33 / 16.0;
// e^r's Taylor coefficients from 1/7! down to 1 (Horner's order); the remainder r^8/8! < 2^-59 for |r| <= ln2/32.
inline constexpr double kExpTaylor[8] = {1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0,
                                         1.0 / 6.0,    0.5,         1.0,         1.0};

// exp_table: e^x = 2^n 2^(j/16) e^r (Tang, ACM TOMS 15(2), 1989, "Table-driven implementation of the exponential
// function in IEEE floating-point arithmetic"), relative error below 3 * 2^-53: table 2^-53, reduction about
// 2^-58, Horner's 7 fused roundings on a sum near 1 under 2^-52, the last two products 2^-53 (the largest over 96
// million random arguments in [-708, 709], [-104, 0] and [-1, 1], against expl: 2.69 * 2^-53). x is clamped
// to [-708, 709] (e^-708 is 0 once rounded to float); NaN stays NaN.
inline double exp_table(double x) {
  auto bits = [](double d) {  // std::bit_cast before C++20
    int64_t i;
    std::memcpy(&i, &d, sizeof i);
    return i;
  };
  x = x < kExpLo ? kExpLo : x;
  x = x > kExpHi ? kExpHi : x;
  const double t = std::fma(x, kExpSixteenOverLn2, kExpShifter);
  const double kd = t - kExpShifter;  // k, exactly
  const double r = std::fma(-kd, kExpLn2LoOver16, std::fma(-kd, kExpLn2HiOver16, x));
  double p = kExpTaylor[0];
  for (int c = 1; c < 8; ++c) p = std::fma(p, r, kExpTaylor[c]);
  const int64_t k = bits(t) - bits(kExpShifter);
  const uint64_t scale_bits = uint64_t((k >> 4) + 1023) << 52;  // 2^n, n = floor(k / 16)
  double scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return p * (kExp2Sixteenths[k & 15] * scale);
}

}  // namespace xtrain::cpu
