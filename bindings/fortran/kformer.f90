! kformer's Fortran module: the C API (bindings/c/kformer_c.h) through iso_c_binding, and helpers
! that take Fortran arrays as they are. A Fortran array x(dim, seq, batch) is the C API's
! (batch, seq, dim): it is passed by address, never copied (contiguous arrays only). The array
! helpers take real(c_double) or real(c_float) arrays, as the model's precision asks.
module kformer
  use, intrinsic :: iso_c_binding
  implicit none
  private

  integer(c_int), parameter, public :: KFORMER_OK = 0, KFORMER_ERROR_ARGUMENT = 1, &
    KFORMER_ERROR_HANDLE = 2, KFORMER_ERROR_FILE = 3, KFORMER_ERROR_NOT_FINITE = 4, &
    KFORMER_ERROR_STATE = 5, KFORMER_ERROR_INTERNAL = 6

  public :: kformer_initialize, kformer_finalize, kformer_model_create, &
    kformer_model_create_from_string, kformer_model_load, kformer_model_save, &
    kformer_model_destroy, kformer_model_state_dim, kformer_model_parameter_count, &
    kformer_model_step_count, kformer_forward, kformer_train_step, kformer_forward_f32, &
    kformer_train_step_f32
  public :: kformer_error_message, kformer_forward_array, kformer_train_step_array, c_string

  interface
    integer(c_int) function kformer_initialize() bind(C, name="kformer_initialize")
      import :: c_int
    end function
    integer(c_int) function kformer_finalize() bind(C, name="kformer_finalize")
      import :: c_int
    end function
    type(c_ptr) function kformer_last_error() bind(C, name="kformer_last_error")
      import :: c_ptr
    end function
    integer(c_int) function kformer_report_error(status, message) &
        bind(C, name="kformer_report_error")
      import :: c_int, c_char
      integer(c_int), value :: status
      character(kind=c_char), dimension(*), intent(in) :: message
    end function
    integer(c_int) function kformer_model_create(config_path, model) &
        bind(C, name="kformer_model_create")
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*), intent(in) :: config_path
      type(c_ptr), intent(out) :: model
    end function
    integer(c_int) function kformer_model_create_from_string(config_json, model) &
        bind(C, name="kformer_model_create_from_string")
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*), intent(in) :: config_json
      type(c_ptr), intent(out) :: model
    end function
    integer(c_int) function kformer_model_load(path, model) bind(C, name="kformer_model_load")
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*), intent(in) :: path
      type(c_ptr), intent(out) :: model
    end function
    integer(c_int) function kformer_model_save(model, path) bind(C, name="kformer_model_save")
      import :: c_int, c_char, c_ptr
      type(c_ptr), value :: model
      character(kind=c_char), dimension(*), intent(in) :: path
    end function
    integer(c_int) function kformer_model_destroy(model) bind(C, name="kformer_model_destroy")
      import :: c_int, c_ptr
      type(c_ptr), intent(inout) :: model
    end function
    integer(c_int) function kformer_model_state_dim(model, dim) &
        bind(C, name="kformer_model_state_dim")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: model
      integer(c_int64_t), intent(out) :: dim
    end function
    integer(c_int) function kformer_model_parameter_count(model, count) &
        bind(C, name="kformer_model_parameter_count")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: model
      integer(c_int64_t), intent(out) :: count
    end function
    integer(c_int) function kformer_model_step_count(model, steps) &
        bind(C, name="kformer_model_step_count")
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: model
      integer(c_int64_t), intent(out) :: steps
    end function
    integer(c_int) function kformer_forward(model, input, batch, seq, dim, output) &
        bind(C, name="kformer_forward")
      import :: c_int, c_ptr, c_int64_t, c_double
      type(c_ptr), value :: model
      real(c_double), dimension(*), intent(in) :: input
      integer(c_int64_t), value :: batch, seq, dim
      real(c_double), dimension(*), intent(inout) :: output
    end function
    integer(c_int) function kformer_train_step(model, input, target, batch, seq, dim, loss) &
        bind(C, name="kformer_train_step")
      import :: c_int, c_ptr, c_int64_t, c_double
      type(c_ptr), value :: model
      real(c_double), dimension(*), intent(in) :: input, target
      integer(c_int64_t), value :: batch, seq, dim
      real(c_double), intent(out) :: loss
    end function
    integer(c_int) function kformer_forward_f32(model, input, batch, seq, dim, output) &
        bind(C, name="kformer_forward_f32")
      import :: c_int, c_ptr, c_int64_t, c_float
      type(c_ptr), value :: model
      real(c_float), dimension(*), intent(in) :: input
      integer(c_int64_t), value :: batch, seq, dim
      real(c_float), dimension(*), intent(inout) :: output
    end function
    integer(c_int) function kformer_train_step_f32(model, input, target, batch, seq, dim, loss) &
        bind(C, name="kformer_train_step_f32")
      import :: c_int, c_ptr, c_int64_t, c_float, c_double
      type(c_ptr), value :: model
      real(c_float), dimension(*), intent(in) :: input, target
      integer(c_int64_t), value :: batch, seq, dim
      real(c_double), intent(out) :: loss
    end function
    integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function
  end interface

  interface kformer_forward_array
    module procedure forward_array_f64, forward_array_f32
  end interface
  interface kformer_train_step_array
    module procedure train_step_array_f64, train_step_array_f32
  end interface

contains

  ! The message of this thread's last failed call.
  function kformer_error_message() result(message)
    character(len=:), allocatable :: message
    type(c_ptr) :: p
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    p = kformer_last_error()
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: message)
    do i = 1, n
      message(i:i) = chars(i)
    end do
  end function

  ! A Fortran string as a C string.
  function c_string(text) result(s)
    character(len=*), intent(in) :: text
    character(kind=c_char, len=len_trim(text) + 1) :: s
    s = trim(text) // c_null_char
  end function

  ! KFORMER_ERROR_ARGUMENT, with a message naming both arrays and their shapes.
  integer(c_int) function shape_mismatch(function_name, name, array_shape, other_name, &
                                         other_shape) result(status)
    character(len=*), intent(in) :: function_name, name, other_name
    integer, intent(in) :: array_shape(3), other_shape(3)
    character(len=256) :: message
    write (message, '(a, ": ", a, " has shape (", i0, 2(", ", i0), ") but ", a, " has shape (", &
           &i0, 2(", ", i0), "); they must be equal")') function_name, name, array_shape, &
           other_name, other_shape
    status = kformer_report_error(KFORMER_ERROR_ARGUMENT, c_string(message))
  end function

  ! output = f(input) for arrays x(dim, seq, batch), passed without a copy.
  integer(c_int) function forward_array_f64(model, input, output) result(status)
    type(c_ptr), intent(in) :: model
    real(c_double), contiguous, intent(in) :: input(:, :, :)
    real(c_double), contiguous, intent(inout) :: output(:, :, :)
    if (any(shape(output) /= shape(input))) then
      status = shape_mismatch("kformer_forward_array", "output", shape(output), "input", shape(input))
      return
    end if
    status = kformer_forward(model, input, int(size(input, 3), c_int64_t), &
                             int(size(input, 2), c_int64_t), int(size(input, 1), c_int64_t), output)
  end function

  ! One training step on arrays x(dim, seq, batch), passed without a copy.
  integer(c_int) function train_step_array_f64(model, input, target, loss) result(status)
    type(c_ptr), intent(in) :: model
    real(c_double), contiguous, intent(in) :: input(:, :, :), target(:, :, :)
    real(c_double), intent(out) :: loss
    loss = 0
    if (any(shape(target) /= shape(input))) then
      status = shape_mismatch("kformer_train_step_array", "target", shape(target), "input", shape(input))
      return
    end if
    status = kformer_train_step(model, input, target, int(size(input, 3), c_int64_t), &
                                int(size(input, 2), c_int64_t), int(size(input, 1), c_int64_t), loss)
  end function

  ! forward_array_f64 on real(c_float) arrays (a model of precision float32).
  integer(c_int) function forward_array_f32(model, input, output) result(status)
    type(c_ptr), intent(in) :: model
    real(c_float), contiguous, intent(in) :: input(:, :, :)
    real(c_float), contiguous, intent(inout) :: output(:, :, :)
    if (any(shape(output) /= shape(input))) then
      status = shape_mismatch("kformer_forward_array", "output", shape(output), "input", shape(input))
      return
    end if
    status = kformer_forward_f32(model, input, int(size(input, 3), c_int64_t), &
                                 int(size(input, 2), c_int64_t), int(size(input, 1), c_int64_t), &
                                 output)
  end function

  ! train_step_array_f64 on real(c_float) arrays (a model of precision float32).
  integer(c_int) function train_step_array_f32(model, input, target, loss) result(status)
    type(c_ptr), intent(in) :: model
    real(c_float), contiguous, intent(in) :: input(:, :, :), target(:, :, :)
    real(c_double), intent(out) :: loss
    loss = 0
    if (any(shape(target) /= shape(input))) then
      status = shape_mismatch("kformer_train_step_array", "target", shape(target), "input", shape(input))
      return
    end if
    status = kformer_train_step_f32(model, input, target, int(size(input, 3), c_int64_t), &
                                    int(size(input, 2), c_int64_t), &
                                    int(size(input, 1), c_int64_t), loss)
  end function

end module kformer
