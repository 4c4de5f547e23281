/* glibc's sinf/cosf algorithm (Arm optimized-routines, MIT; see
 * third_party_arm_sincosf.c), for the wasm32 build's ROPE. */
#ifndef THIRD_PARTY_ARM_SINCOSF_H
#define THIRD_PARTY_ARM_SINCOSF_H
float le_arm_sinf(float y);
float le_arm_cosf(float y);
#endif
