// The NVML subset weft calls, declared here rather than taken from NVIDIA's header, which
// this tree does not carry: return codes, enum values, struct layouts, field ids and the
// signatures of the entry points nvml_source.cc resolves with dlsym (and tests/fakes/
// fake_nvml.cc defines). Every value and layout is from nvml.h as published in
// github.com/NVIDIA/go-nvml (pkg/nvml/nvml.h, synced with CUDA 13.3); the NVML names are in
// the comments. NVML is a C API: its enums pass as int, its handles as pointers.
#pragma once

namespace weft::health::nvml {

using Return = int;                                 // nvmlReturn_t
inline constexpr Return kSuccess = 0;               // NVML_SUCCESS
inline constexpr Return kErrorUninitialized = 1;    // NVML_ERROR_UNINITIALIZED
inline constexpr Return kErrorInvalidArgument = 2;  // NVML_ERROR_INVALID_ARGUMENT
inline constexpr Return kErrorNotSupported = 3;     // NVML_ERROR_NOT_SUPPORTED
inline constexpr Return kErrorNotFound = 6;         // NVML_ERROR_NOT_FOUND
inline constexpr Return kErrorTimeout = 10;         // NVML_ERROR_TIMEOUT
inline constexpr Return kErrorGpuIsLost = 15;       // NVML_ERROR_GPU_IS_LOST
inline constexpr Return kErrorUnknown = 999;        // NVML_ERROR_UNKNOWN

inline constexpr int kMemoryErrorCorrected = 0;    // NVML_MEMORY_ERROR_TYPE_CORRECTED
inline constexpr int kMemoryErrorUncorrected = 1;  // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
inline constexpr int kVolatileEcc = 0;             // NVML_VOLATILE_ECC
inline constexpr int kFeatureDisabled = 0;         // NVML_FEATURE_DISABLED (nvmlEnableState_t)
inline constexpr int kFeatureEnabled = 1;          // NVML_FEATURE_ENABLED
// nvmlEventTypeXidCriticalError
inline constexpr unsigned long long kEventTypeXidCriticalError = 0x8;

// nvmlNvLinkErrorCounter_t
inline constexpr int kNvlinkErrorDlReplay = 0;    // NVML_NVLINK_ERROR_DL_REPLAY
inline constexpr int kNvlinkErrorDlRecovery = 1;  // NVML_NVLINK_ERROR_DL_RECOVERY
inline constexpr int kNvlinkErrorDlCrcFlit = 2;   // NVML_NVLINK_ERROR_DL_CRC_FLIT
inline constexpr int kNvlinkErrorDlCrcData = 3;   // NVML_NVLINK_ERROR_DL_CRC_DATA

// NVML_NVLINK_MAX_LINKS: 18 in the headers up to CUDA 13.2, 36 from 13.3. Asking a driver
// about a link it does not have returns an error, which weft reads as "no such link".
inline constexpr int kMaxLinks = 36;

// Field ids for nvmlDeviceGetFieldValues (NVML_FI_DEV_NVLINK_...). The per-link error counters
// have one id per link for links 0-5 (<X>_ERROR_COUNT_L0, +1 per link) and 6-11 (_L6, +1 per
// link); past link 11 only replay and recovery have a field, with the link in scopeId.
inline constexpr unsigned kFieldNvlinkCrcFlitL0 = 32;         // ..._CRC_FLIT_ERROR_COUNT_L0
inline constexpr unsigned kFieldNvlinkCrcDataL0 = 39;         // ..._CRC_DATA_ERROR_COUNT_L0
inline constexpr unsigned kFieldNvlinkReplayL0 = 46;          // ..._REPLAY_ERROR_COUNT_L0
inline constexpr unsigned kFieldNvlinkRecoveryL0 = 53;        // ..._RECOVERY_ERROR_COUNT_L0
inline constexpr unsigned kFieldNvlinkCrcFlitL6 = 96;         // ..._CRC_FLIT_ERROR_COUNT_L6
inline constexpr unsigned kFieldNvlinkCrcDataL6 = 102;        // ..._CRC_DATA_ERROR_COUNT_L6
inline constexpr unsigned kFieldNvlinkReplayL6 = 108;         // ..._REPLAY_ERROR_COUNT_L6
inline constexpr unsigned kFieldNvlinkRecoveryL6 = 114;       // ..._RECOVERY_ERROR_COUNT_L6
inline constexpr unsigned kFieldNvlinkErrorDlReplay = 161;    // ..._ERROR_DL_REPLAY
inline constexpr unsigned kFieldNvlinkErrorDlRecovery = 162;  // ..._ERROR_DL_RECOVERY

// nvmlValueType_t
inline constexpr int kValueDouble = 0;            // NVML_VALUE_TYPE_DOUBLE
inline constexpr int kValueUnsignedInt = 1;       // NVML_VALUE_TYPE_UNSIGNED_INT
inline constexpr int kValueUnsignedLong = 2;      // NVML_VALUE_TYPE_UNSIGNED_LONG
inline constexpr int kValueUnsignedLongLong = 3;  // NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
inline constexpr int kValueSignedLongLong = 4;    // NVML_VALUE_TYPE_SIGNED_LONG_LONG
inline constexpr int kValueSignedInt = 5;         // NVML_VALUE_TYPE_SIGNED_INT
inline constexpr int kValueUnsignedShort = 6;     // NVML_VALUE_TYPE_UNSIGNED_SHORT

struct DeviceOpaque;
using Device = DeviceOpaque*;  // nvmlDevice_t
struct EventSetOpaque;
using EventSet = EventSetOpaque*;  // nvmlEventSet_t

/// nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 and nvmlDeviceGetNvLinkRemotePciInfo_v2 fill it.
/// The original nvmlDeviceGetPciInfo fills an older, shorter layout that starts with a
/// 16-byte busId: it lands in bus_id_legacy.
struct PciInfo {
  char bus_id_legacy[16];  // busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];  // busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]: "00000000:18:00.0"
};
static_assert(sizeof(PciInfo) == 68);

struct EventData {  // nvmlEventData_t
  Device device;
  unsigned long long event_type;
  unsigned long long event_data;  // the XID number for an XID event
  unsigned gpu_instance_id, compute_instance_id;
};
static_assert(sizeof(EventData) == 32);

union Value {  // nvmlValue_t
  double d;
  int si;
  unsigned ui;
  unsigned long ul;
  unsigned long long ull;
  long long sll;
  unsigned short us;
};

struct FieldValue {  // nvmlFieldValue_t
  unsigned field_id, scope_id;
  long long timestamp, latency_usec;
  int value_type;      // nvmlValueType_t
  Return nvml_return;  // this field's own result
  Value value;
};
static_assert(sizeof(FieldValue) == 40);

// The entry points, one type each, named after the symbol.
using InitV2 = Return();                                     // nvmlInit_v2
using Shutdown = Return();                                   // nvmlShutdown
using ErrorString = const char*(Return);                     // nvmlErrorString
using DeviceGetCountV2 = Return(unsigned*);                  // nvmlDeviceGetCount_v2
using DeviceGetHandleByIndexV2 = Return(unsigned, Device*);  // ..._v2
using DeviceGetPciInfo = Return(Device, PciInfo*);           // _v3 and the original
using DeviceGetTotalEccErrors = Return(Device, int, int, unsigned long long*);
using DeviceGetNvLinkState = Return(Device, unsigned, int*);
using DeviceGetNvLinkRemotePciInfoV2 = Return(Device, unsigned, PciInfo*);
using DeviceGetNvLinkErrorCounter = Return(Device, unsigned, int, unsigned long long*);
using DeviceGetFieldValues = Return(Device, int, FieldValue*);
using EventSetCreate = Return(EventSet*);
using DeviceRegisterEvents = Return(Device, unsigned long long, EventSet);
using EventSetWaitV2 = Return(EventSet, EventData*, unsigned);  // timeout in ms
using EventSetFree = Return(EventSet);

/// The entry points of one loaded library, resolved with dlsym: nullptr where it lacks one.
struct Api {
  InitV2* init = nullptr;
  Shutdown* shutdown = nullptr;
  ErrorString* error_string = nullptr;
  DeviceGetCountV2* get_count = nullptr;
  DeviceGetHandleByIndexV2* get_handle_by_index = nullptr;
  DeviceGetPciInfo* get_pci_info = nullptr;     // nvmlDeviceGetPciInfo_v3
  DeviceGetPciInfo* get_pci_info_v1 = nullptr;  // nvmlDeviceGetPciInfo, for drivers before _v3
  DeviceGetTotalEccErrors* get_total_ecc_errors = nullptr;
  DeviceGetNvLinkState* get_nvlink_state = nullptr;
  DeviceGetNvLinkRemotePciInfoV2* get_nvlink_remote_pci_info = nullptr;
  DeviceGetNvLinkErrorCounter* get_nvlink_error_counter = nullptr;
  DeviceGetFieldValues* get_field_values = nullptr;
  EventSetCreate* event_set_create = nullptr;
  DeviceRegisterEvents* register_events = nullptr;
  EventSetWaitV2* event_set_wait = nullptr;
  EventSetFree* event_set_free = nullptr;
};

}  // namespace weft::health::nvml
