// common.glsl — what every tensord compute shader shares: the parameter block layout
// (backends/vulkan/vk_internal.h, VK_P_* word indexes, must match), the workgroup size and
// the opcode specialization constant. Included by each .comp file; glslc compiles those with
// -D defines choosing the element types (backends/vulkan/meson.build lists the variants).
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
// f32 subnormals are kept, not flushed to zero (SPIR-V DenormPreserve, 4459, for 32-bit
// floats, with its capability, 4464, from SPV_KHR_float_controls, core in Vulkan 1.2):
// NVIDIA's driver flushes them unless a shader asks; vk_device.c logs a device that cannot.
// Likewise NaN, infinities and the sign of zero are kept through f32 arithmetic
// (SignedZeroInfNanPreserve, 4461, capability 4466): without it NVIDIA's compiler may assume
// no NaN and fold `x < 0 ? 0 : x` into max(x, 0), `x != x` into false (the H200 run of
// 2026-12-05: RELU, CLAMP, MAXIMUM, MINIMUM of a NaN gave a number, RELU of -0 gave +0).
// vk_device.c cuts either mode and its capability out of the SPIR-V for a device without
// the matching shaderDenormPreserveFloat32 / shaderSignedZeroInfNanPreserveFloat32.
#extension GL_EXT_spirv_intrinsics : require
spirv_execution_mode(4459, 32);
spirv_execution_mode(4461, 32);
spirv_instruction(extensions = ["SPV_KHR_float_controls"], capabilities = [4464, 4466], id = 0)
void td_float_controls_capabilities();

#if !defined(NO_LOCAL_SIZE)
layout(local_size_x = 256) in;
#endif
layout(constant_id = 0) const uint OP = 0u;

layout(std430, binding = 0) readonly buffer Params { uint P[]; };

#define P_N 0
#define P_RANK 1
#define P_DIMS 2
#define P_STR_O 10
#define P_STR_A 18
#define P_STR_B 26
#define P_STR_C 34
#define P_BASE 42
#define P_F 48
#define P_SEED 56
#define P_I 58
#define P_SKEW_A 127

double pf(int k) { return packDouble2x32(uvec2(P[P_F + 2 * k], P[P_F + 2 * k + 1])); }

// Grid-stride loop bounds: element i of this invocation, the stride, without uint overflow.
uint gstride() { return gl_NumWorkGroups.x * gl_WorkGroupSize.x; }
